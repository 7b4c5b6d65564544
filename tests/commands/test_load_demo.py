"""The demo workspace: loads once, changes nothing the second time, and has the shapes the product
is about (same-named people, private facts that stay private)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from accounts.models import Actor, IdentityLink, Tenant, UserActor
from history.audience import AudienceKind
from history.models import Conversation, EvidenceMethod, Message, MessageSourceEvidence
from memory.models import EntryStatus, EvidenceKind, MemoryEntry, MemoryEvidence, MemoryOperation, MemoryRevision

pytestmark = pytest.mark.django_db

COUNTED = (Tenant, Actor, Conversation, Message, MemoryEntry, MemoryRevision, MemoryEvidence, MemoryOperation, User)


def load() -> str:
    out = StringIO()
    call_command("load_demo", stdout=out)
    return out.getvalue()


@pytest.fixture
def demo() -> str:
    return load()


def test_second_run_changes_nothing(demo: str):
    """Running the command twice changes nothing and says the demo is already there."""
    before = {model: model.objects.count() for model in COUNTED}
    second = load()
    assert "already loaded" in second
    assert {model: model.objects.count() for model in COUNTED} == before


def test_workspace_shape(demo: str):
    tenant = Tenant.objects.get(slug="acme")
    agent = tenant.agents.get(name="acme-assistant")
    assert {c.namespace for c in agent.connectors.all()} >= {"slack:acme"}
    assert agent.connectors.filter(type="email").exists()
    assert 5 <= Actor.objects.filter(tenant=tenant).count() <= 6
    sams = Actor.objects.filter(tenant=tenant, display_name="Sam")
    assert sams.count() == 2
    assert len({s.external_id for s in sams}) == 2
    assert IdentityLink.objects.filter(agent=agent, revoked_at__isnull=True).count() == 1

    general = Conversation.objects.get(agent=agent, title="#general")
    assert (general.audience_kind, general.audience_namespace, general.project) == ("workspace", "slack:acme", "atlas")
    members = Conversation.objects.filter(agent=agent, audience_kind=AudienceKind.MEMBERS)
    assert sorted(len(c.audience_readers) for c in members if c.connector.type == "slack") == [1, 1, 3]


def test_transcript_is_authenticated_and_spread_over_weeks(demo: str):
    # Inbound messages, as connectors saw them; the demo turns' replies are the agent's own.
    messages = Message.objects.filter(agent__tenant__slug="acme", direction="inbound")
    assert 50 <= messages.count() <= 70
    assert (
        MessageSourceEvidence.objects.filter(message__in=messages, method=EvidenceMethod.CONNECTOR_SIGNED).count()
        == messages.count()
    )
    first, last = messages.order_by("created_at").first(), messages.order_by("created_at").last()
    assert first is not None and last is not None
    assert (last.created_at - first.created_at).days >= 14


def test_dm_memories_stay_with_their_one_reader(demo: str):
    """A memory learned in a direct message has that DM's single reader as its source audience."""
    direct = [c for c in Conversation.objects.filter(agent__tenant__slug="acme") if c.audience.is_direct]
    assert len(direct) >= 2
    checked = 0
    for conversation in direct:
        evidence = MemoryEvidence.objects.filter(
            kind=EvidenceKind.SOURCE_MESSAGE, message__conversation=conversation
        ).select_related("revision")
        for row in evidence:
            assert row.revision.audience == conversation.audience
            assert row.revision.audience_kind == AudienceKind.MEMBERS
            assert len(row.revision.audience_readers) == 1
            checked += 1
    assert checked >= 10


def test_memories_cover_types_amendments_and_forgetting(demo: str):
    entries = MemoryEntry.objects.filter(agent__tenant__slug="acme").select_related("current_revision")
    assert 24 <= entries.count() <= 60
    types = {e.current_revision.belief_type for e in entries if e.current_revision}
    assert {"preference", "user_model_attr", "project_fact", "decision", "instruction"} <= types
    assert {e.current_revision.portability for e in entries if e.current_revision} == {
        "portable",
        "contextual",
        "local",
    }
    assert entries.filter(current_revision__number=2).count() >= 2
    assert entries.filter(status=EntryStatus.FORGOTTEN).count() == 1
    assert entries.filter(current_revision__audience_kind=AudienceKind.WORKSPACE).exists()
    assert entries.filter(current_revision__audience_readers__len=3).exists()
    # Every memory is built from a real source message (no operator statements, no unknown provenance).
    assert not entries.filter(current_revision__audience_kind__in=["unknown", "nobody"]).exists()


def test_dm_people_can_log_in(demo: str):
    for username in ("priya", "sam"):
        user = User.objects.get(username=username)
        assert user.check_password("engram-demo")
        assert UserActor.objects.filter(user=user).exists()
    sam_actor = UserActor.objects.get(user__username="sam").actor
    assert sam_actor.display_name == "Sam"
