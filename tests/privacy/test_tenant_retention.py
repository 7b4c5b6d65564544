"""Retention per tenant: messages and memories older than the tenant's periods are erased by the daily
task with the erasure cascade; a dry run reports and changes nothing; tenants without a period and
newer rows are untouched."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from accounts.management.commands.load_demo import START
from accounts.models import Tenant
from history.models import Message
from memory.erasure import retention_enforce, retention_plan
from memory.models import EntryStatus, ErasureEvent, ErasureKind, MemoryEntry, MemoryEvidence, MemoryRevision
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


def test_messages_past_the_period_go_with_what_was_learned_from_them(acme: Tenant) -> None:
    """With a message period, messages written before the cutoff are erased, and so is every memory
    learned from one of them (whole entries: the launch date amended later from a newer message goes
    too); newer messages and memories learned only from them stay."""
    acme.message_retention_days = 30
    acme.save(update_fields=["message_retention_days"])
    cutoff = START + timedelta(days=11, hours=12)
    now = cutoff + timedelta(days=30)
    old = set(Message.objects.filter(agent__tenant=acme, created_at__lt=cutoff).values_list("pk", flat=True))
    new = set(Message.objects.filter(agent__tenant=acme, created_at__gte=cutoff).values_list("pk", flat=True))
    learned_old = set(MemoryEvidence.objects.filter(message_id__in=old).values_list("revision__entry_id", flat=True))
    assert old and new and learned_old

    dry = retention_plan(acme, now=now)
    assert dry.ids["messages"] == old
    assert dry.ids["entries"] >= learned_old

    event = retention_enforce(tenant=acme, now=now)
    assert event is not None and event.kind == ErasureKind.RETENTION
    assert not Message.objects.filter(pk__in=old).exists()
    assert set(Message.objects.filter(agent__tenant=acme).values_list("pk", flat=True)) == new
    assert not MemoryEntry.objects.filter(pk__in=dry.ids["entries"]).exists()
    survivors = MemoryEntry.objects.filter(agent__tenant=acme)
    assert survivors.exists()
    assert not MemoryEvidence.objects.filter(revision__entry__in=survivors, message_id__in=old).exists()
    assert event.counts["messages"] == len(old) and event.counts["memories"] == len(dry.ids["entries"])
    assert retention_enforce(tenant=acme, now=now) is None  # nothing left past the period: no tombstone


def test_memories_not_revised_within_the_period_are_erased_and_messages_stay(acme: Tenant) -> None:
    """A memory period erases entries whose newest revision is older than the cutoff; messages stay."""
    acme.memory_retention_days = 30
    acme.save(update_fields=["memory_retention_days"])
    messages = Message.objects.count()
    assert retention_enforce(tenant=acme, now=timezone.now() + timedelta(days=29)) is None
    event = retention_enforce(tenant=acme, now=timezone.now() + timedelta(days=31))
    assert event is not None
    assert not MemoryEntry.objects.filter(agent__tenant=acme).exists()
    assert Message.objects.count() == messages
    assert event.counts["memories"] == 42


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
    acme.message_retention_days = 365  # every demo message is from 2025
    acme.save(update_fields=["message_retention_days"])
    before = counts()

    out = StringIO()
    call_command("retention", "--dry-run", stdout=out)
    report = out.getvalue()
    assert "acme: messages before" in report and "would erase:" in report and "60 messages" in report
    assert counts() == before
    assert not ErasureEvent.objects.exists()

    done = enforce_retention()
    assert set(done) == {"acme"} and done["acme"]["messages"] == 60
    assert not Message.objects.filter(agent__tenant=acme).exists()
    assert not MemoryEntry.objects.filter(agent__tenant=acme, status=EntryStatus.LIVE).exists()
    assert Message.objects.filter(agent__tenant=other_tenant).count() == 1
    assert enforce_retention() == {}
