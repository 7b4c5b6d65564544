"""The demo workspace: loads once, changes nothing the second time, has the shapes the product is
about (same-named people, private facts that stay private), and dates that agree with each other and
with the load: the transcript ends shortly before it, the turns follow, and no memory is learned after
a turn that used it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from accounts.models import Actor, IdentityLink, Tenant, UserActor
from demo.calendar import DemoCalendar, span_text
from demo.management.commands.load_demo import TRANSCRIPT_END
from history.audience import AudienceKind
from history.models import Conversation, EvidenceMethod, Message, MessageSourceEvidence, Turn
from memory.models import (
    EntryStatus,
    EvidenceKind,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    RecallTraceItem,
)

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


def test_the_demo_is_dated_up_to_the_load_and_its_turns_follow(demo: str):
    """The transcript ends shortly before the load (within a week), every demo turn's message comes
    after its conversation's transcript, and each turn, and its reply, after its message."""
    turns = list(Turn.objects.filter(agent__tenant__slug="acme").select_related("inbound_message", "reply"))
    assert len(turns) == 5
    transcript = Message.objects.filter(agent__tenant__slug="acme", direction="inbound").exclude(
        pk__in=[t.inbound_message_id for t in turns]
    )
    last = transcript.latest("created_at").created_at
    first_turn = min(t.created_at for t in turns)
    assert first_turn - timedelta(days=8) < last < first_turn
    for turn in turns:
        said = turn.inbound_message.created_at
        assert turn.created_at >= said
        assert turn.reply is not None and turn.reply.created_at >= turn.created_at
        assert not transcript.filter(conversation_id=turn.inbound_message.conversation_id, created_at__gt=said).exists()


def test_no_memory_is_learned_after_a_turn_that_used_it_or_before_it_was_said(demo: str):
    """Each memory a demo turn recalled or cited was recorded before the turn; every memory is
    recorded after the messages it was learned from and holds from one of them, not before it was
    said and not from after it was learned."""
    for turn in Turn.objects.filter(agent__tenant__slug="acme").select_related("reply"):
        assert turn.reply is not None
        used = MemoryRevision.objects.filter(
            pk__in=[
                *RecallTraceItem.objects.filter(trace__turn=turn).values_list("revision_id", flat=True),
                *turn.reply.cited_revision_ids,
            ]
        ).exclude(turn=turn)  # what the turn itself wrote
        assert used.exists()
        assert not used.filter(recorded_at__gt=turn.created_at).exists()
    revisions = MemoryRevision.objects.filter(agent__tenant__slug="acme")
    for revision in revisions:
        said = MemoryEvidence.objects.filter(revision=revision, kind=EvidenceKind.SOURCE_MESSAGE).values_list(
            "message__created_at", flat=True
        )
        assert said and max(said) <= revision.recorded_at, revision.body
        assert min(said) <= revision.valid_from <= revision.recorded_at, revision.body


def test_dates_people_mention_are_ahead_of_the_load(demo: str):
    """The launch the turns talk about, leave and trips are still to come when the demo loads."""
    now = timezone.now()
    launch = MemoryRevision.objects.get(body__startswith="The Atlas beta launches on", number=2)
    assert launch.body.endswith("two weeks later than planned.")
    leave = MemoryRevision.objects.get(body__contains="wedding in Porto")
    assert leave.valid_to is not None and leave.valid_to > now
    calendar = DemoCalendar.ending_before(now, last=TRANSCRIPT_END)
    assert datetime.combine(calendar.beta_launch_moved, datetime.min.time(), UTC) > now
    assert span_text(*calendar.priya_leave, year=True) in leave.body


@pytest.mark.parametrize("day", range(7))
def test_the_calendar_starts_on_a_monday_and_ends_before_now(day: int) -> None:
    """Whatever the weekday and hour of the load, the transcript starts on a Monday (so the weekdays its
    messages name hold) and ends before the load, within a week of it."""
    for hour in (0, 9, 15, 23):
        now = datetime(2026, 3, 2 + day, hour, 30, tzinfo=UTC)
        calendar = DemoCalendar.ending_before(now, last=TRANSCRIPT_END)
        assert calendar.start.weekday() == 0 and calendar.start.time() == datetime.min.time()
        end = calendar.start + TRANSCRIPT_END
        assert now - timedelta(days=7) <= end < now
        assert calendar.day(42).weekday() == calendar.beta_launch_moved.weekday() == 0


def test_date_spans_read_naturally() -> None:
    d = DemoCalendar(datetime(2026, 11, 9, tzinfo=UTC))
    assert d.names()["launch_y"] == "Monday 21 December 2026"
    assert span_text(*d.priya_leave, year=True) == "29 December 2026-1 January 2027"
    assert span_text(d.day(50), d.day(53)) == "29 December-1 January"
    assert span_text(d.day(1), d.day(3), year=True) == "10-12 November 2026"
    assert d.names()["school_y"] == "September 2027"
