"""Retention per tenant: messages and memories older than the tenant's periods are erased by the daily
task with the erasure cascade; a dry run reports and changes nothing; tenants without a period and
newer rows are untouched."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import Q
from django.utils import timezone

from accounts.models import Tenant
from history.models import Message, MessageDirection
from memory.erasure import retention_enforce, retention_plan
from memory.models import ErasureEvent, ErasureKind, MemoryEntry, MemoryEvidence, MemoryRevision
from memory.tasks import enforce_retention
from tests.api.conftest import runtime_for
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme() -> Tenant:
    call_command("load_demo", stdout=StringIO())
    return Tenant.objects.get(slug="acme")


def counts() -> tuple[int, int, int]:
    return Message.objects.count(), MemoryEntry.objects.count(), MemoryRevision.objects.count()


def replies_built_from(messages: set[int], revisions: set[int]) -> Q:
    """Agent replies whose provenance names one of ``messages`` or ``revisions``."""
    return Q(direction=MessageDirection.OUTBOUND) & (
        Q(history_message_ids__overlap=sorted(messages))
        | Q(memory_revision_ids__overlap=sorted(revisions))
        | Q(cited_revision_ids__overlap=sorted(revisions))
    )


def assert_beyond_seeds_only_replies_built_from_erased_rows(
    planned: set[int], *, seeds: set[int], erased_revisions: set[int], tenant: Tenant
) -> None:
    """Read before the erasure runs: every planned message that is not a seed is an agent reply built
    from a planned message or an erased revision (whatever its own date), and no reply left out of the
    plan was built from one. Together these pin the planned messages to the seeds and their closure."""
    extra = Message.objects.filter(pk__in=planned - seeds)
    assert extra.count() == len(planned - seeds)
    for message in extra:
        from_messages = set(message.history_message_ids) & planned
        from_revisions = (set(message.memory_revision_ids) | set(message.cited_revision_ids)) & erased_revisions
        assert message.direction == MessageDirection.OUTBOUND and (from_messages or from_revisions), message.pk
    left = Message.objects.filter(agent__tenant=tenant).exclude(pk__in=planned)
    assert not left.filter(replies_built_from(planned, erased_revisions)).exists()


def test_messages_past_the_period_go_with_what_was_learned_from_them(acme: Tenant) -> None:
    """With a message period, messages written before the cutoff are erased, and so is every memory
    learned from one of them (whole entries: the launch date amended later from a newer message goes
    too) and every agent reply built from what is erased; newer messages people wrote, and memories
    learned only from messages that stay, stay."""
    acme.message_retention_days = 30
    acme.save(update_fields=["message_retention_days"])
    # The demo's transcript starts at 09:02 on its first day and ends shortly before the load; the
    # cutoff falls on its twelfth day.
    first = Message.objects.filter(agent__tenant=acme).earliest("created_at").created_at
    cutoff = first.replace(hour=0, minute=0) + timedelta(days=11, hours=12)
    now = cutoff + timedelta(days=30)
    old = set(Message.objects.filter(agent__tenant=acme, created_at__lt=cutoff).values_list("pk", flat=True))
    new = set(Message.objects.filter(agent__tenant=acme, created_at__gte=cutoff).values_list("pk", flat=True))
    learned_old = set(MemoryEvidence.objects.filter(message_id__in=old).values_list("revision__entry_id", flat=True))
    assert old and new and learned_old

    dry = retention_plan(acme, now=now)
    erased_revisions = set(MemoryRevision.objects.filter(entry_id__in=dry.ids["entries"]).values_list("pk", flat=True))
    assert dry.ids["messages"] >= old
    assert dry.ids["entries"] >= learned_old
    assert_beyond_seeds_only_replies_built_from_erased_rows(
        dry.ids["messages"], seeds=old, erased_revisions=erased_revisions, tenant=acme
    )
    replies = dry.ids["messages"] - old

    event = retention_enforce(tenant=acme, now=now)
    assert event is not None and event.kind == ErasureKind.RETENTION
    assert not Message.objects.filter(pk__in=old).exists()
    assert set(Message.objects.filter(agent__tenant=acme).values_list("pk", flat=True)) == new - replies
    assert not MemoryEntry.objects.filter(pk__in=dry.ids["entries"]).exists()
    survivors = MemoryEntry.objects.filter(agent__tenant=acme)
    assert survivors.exists()
    erased = dry.ids["messages"]
    assert not MemoryEvidence.objects.filter(revision__entry__in=survivors, message_id__in=erased).exists()
    assert event.counts["messages"] == len(erased) and event.counts["memories"] == len(dry.ids["entries"])
    assert retention_enforce(tenant=acme, now=now) is None  # nothing left past the period: no tombstone


def test_memories_not_revised_within_the_period_are_erased_and_messages_stay(acme: Tenant) -> None:
    """A memory period erases entries whose newest revision is older than the cutoff, with the agent
    replies built from them; the messages people wrote stay."""
    acme.memory_retention_days = 30
    acme.save(update_fields=["memory_retention_days"])
    messages = set(Message.objects.values_list("pk", flat=True))
    entries = MemoryEntry.objects.filter(agent__tenant=acme).count()
    revisions = set(MemoryRevision.objects.filter(agent__tenant=acme).values_list("pk", flat=True))
    assert retention_enforce(tenant=acme, now=timezone.now() + timedelta(days=29)) is None
    later = timezone.now() + timedelta(days=31)
    replies = retention_plan(acme, now=later).ids["messages"]
    # Every acme memory is past the period, so every revision is erased and no message is a seed.
    assert_beyond_seeds_only_replies_built_from_erased_rows(
        replies, seeds=set(), erased_revisions=revisions, tenant=acme
    )
    event = retention_enforce(tenant=acme, now=later)
    assert event is not None
    assert not MemoryEntry.objects.filter(agent__tenant=acme).exists()
    assert set(Message.objects.values_list("pk", flat=True)) == messages - replies
    assert event.counts["memories"] == entries and event.counts.get("messages", 0) == len(replies)


def test_the_daily_task_and_the_dry_run_command(acme: Tenant) -> None:
    """The beat schedule runs ``enforce_retention`` daily; ``retention --dry-run`` reports per tenant and
    changes nothing; the task then erases only tenants past their periods."""
    assert settings.CELERY_BEAT_SCHEDULE["enforce-retention"] == {
        "task": "memory.tasks.enforce_retention",
        "schedule": 86_400.0,
    }
    other = runtime_for(AgentFactory.create())
    other.say("general", "U100", "Morning all")
    other_tenant = other.agent.tenant
    other_tenant.message_retention_days = 365
    other_tenant.save(update_fields=["message_retention_days"])
    # The demo's three weeks of transcript end shortly before the load: a week's period erases its
    # first two weeks (and what was learned from them, and the replies built from that), not the rest.
    acme.message_retention_days = 7
    acme.save(update_fields=["message_retention_days"])
    planned = retention_plan(acme).ids["messages"]
    assert 0 < len(planned) < Message.objects.filter(agent__tenant=acme).count()
    before = counts()

    out = StringIO()
    call_command("retention", "--dry-run", stdout=out)
    report = out.getvalue()
    assert "acme: messages before" in report and "would erase:" in report and f" {len(planned)} messages" in report
    assert counts() == before
    assert not ErasureEvent.objects.exists()

    done = enforce_retention()
    assert set(done) == {"acme"} and done["acme"]["messages"] == len(planned)
    assert not Message.objects.filter(pk__in=planned).exists()
    assert Message.objects.filter(agent__tenant=acme).exists()
    assert not MemoryEvidence.objects.filter(message_id__in=planned).exists()
    assert Message.objects.filter(agent__tenant=other_tenant).count() == 1
    assert enforce_retention() == {}
