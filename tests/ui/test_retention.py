"""Retention and deletion: operator trace fields expire on a schedule while what the user is shown
stays; deleting a conversation deletes its explanations and every memory learned from it, leaving
nothing searchable. And recall misses are counted as a formation signal."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from history.models import Conversation, Message, MessageSearchDocument, MessageSourceEvidence, Session, Turn
from memory.embeddings.index import vectors_stored
from memory.models import (
    IndexOutbox,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    MessageEmbedding,
    RecallMiss,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    RevisionEmbedding,
    RevisionSearchDocument,
)
from memory.rejections import rejection_record
from memory.retention import conversation_delete
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.query import RecallQuery, form_query
from memory.retrieval.service import recall, task_budget
from memory.tasks import expire_trace_operator_fields
from tests.ui.conftest import World, shown_ids

pytestmark = pytest.mark.django_db


# --- trace retention ------------------------------------------------------------------------------


def test_operator_fields_expire_after_the_retention_window_and_user_fields_stay(world: World) -> None:
    assert settings.ENGRAM_TRACE_OPERATOR_RETENTION_DAYS == 30
    schedule = settings.CELERY_BEAT_SCHEDULE["expire-trace-operator-fields"]
    assert schedule == {"task": "memory.tasks.expire_trace_operator_fields", "schedule": 86_400.0}
    traces = world.traces()
    old, recent = traces[0], traces[1]
    RecallTrace.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=31))
    page_before = world.client(world.alice).get(f"/turns/{world.turn.pk}/").content.decode()
    kept = {
        field: getattr(old, field)
        for field in ("rendered_text", "rendered_sha256", "considered_count", "returned_count", "blocked_count")
    }
    items_before = list(old.items.values_list("revision_id", "band", "carried"))

    assert expire_trace_operator_fields() == 1
    assert expire_trace_operator_fields() == 0  # idempotent

    old.refresh_from_db()
    assert (old.query_text, old.arms, old.candidate_ids, old.dropped_ids) == (None, None, None, None)
    assert old.operator_fields_cleared_at is not None
    assert {field: getattr(old, field) for field in kept} == kept
    assert list(old.items.values_list("revision_id", "band", "carried")) == items_before
    recent.refresh_from_db()
    assert recent.query_text is not None and recent.candidate_ids is not None
    assert recent.operator_fields_cleared_at is None
    page_after = world.client(world.alice).get(f"/turns/{world.turn.pk}/").content.decode()
    assert shown_ids(page_after) == shown_ids(page_before)


# --- conversation deletion ------------------------------------------------------------------------


def test_deleting_a_conversation_leaves_nothing_of_it_searchable_or_recallable(world: World) -> None:
    dm = world.runtime.conversation("dm-alice")
    item = RecallTraceItem.objects.filter(trace__turn=world.turn, revision=world.revisions["manager"]).first()
    assert item is not None
    rejection_record(user=world.alice, trace_item_id=item.pk, kind="wrong")
    if vectors_stored():  # lexical-only servers have no vectors to rebuild or delete
        call_command("embeddings", "rebuild")
    message_ids = set(Message.objects.filter(conversation=dm).values_list("pk", flat=True))
    learned_here = [world.revisions[k] for k in ("lisbon", "tea", "manager", "poison")]
    revision_ids = {r.pk for r in learned_here}
    entry_ids = {r.entry_id for r in learned_here}
    turn_ids = set(Turn.objects.filter(session__conversation=dm).values_list("pk", flat=True))
    trace_ids = set(RecallTrace.objects.filter(session__conversation=dm).values_list("pk", flat=True))
    events = RetrievalEvent.objects.filter(trace_id__in=trace_ids).count()
    if vectors_stored():
        assert MessageEmbedding.objects.filter(message_id__in=message_ids).exists()
        assert RevisionEmbedding.objects.filter(revision_id__in=revision_ids).exists()

    with pytest.raises(CommandError, match="pass --yes"):
        call_command("conversation_delete", str(dm.pk))
    assert Conversation.objects.filter(pk=dm.pk).exists()

    call_command("conversation_delete", str(dm.pk), "--yes")

    assert not Conversation.objects.filter(pk=dm.pk).exists()
    assert not Message.objects.filter(pk__in=message_ids).exists()
    assert not MessageSearchDocument.objects.filter(message_id__in=message_ids).exists()
    assert not MessageSourceEvidence.objects.filter(message_id__in=message_ids).exists()
    assert not IndexOutbox.objects.filter(target="message", target_id__in=message_ids).exists()
    assert not Session.objects.filter(conversation_id=dm.pk).exists()
    assert not Turn.objects.filter(pk__in=turn_ids).exists()
    assert not RecallTrace.objects.filter(pk__in=trace_ids).exists()
    assert not RecallTraceItem.objects.filter(trace_id__in=trace_ids).exists()
    assert not MemoryEntry.objects.filter(pk__in=entry_ids).exists()
    assert not MemoryRevision.objects.filter(pk__in=revision_ids).exists()
    assert not MemoryEvidence.objects.filter(revision_id__in=revision_ids).exists()
    assert not RevisionSearchDocument.objects.filter(revision_id__in=revision_ids).exists()
    assert not IndexOutbox.objects.filter(target="revision", target_id__in=revision_ids).exists()
    assert not MemoryOperation.objects.filter(entry_id__in=entry_ids).exists()
    assert not Rejection.objects.exists()
    if vectors_stored():  # the embeddings went with their revisions and messages (cascading keys)
        assert not MessageEmbedding.objects.filter(message_id__in=message_ids).exists()
        assert not RevisionEmbedding.objects.filter(revision_id__in=revision_ids).exists()
    # Audit rows that hold only ids and digests stay, detached.
    assert RetrievalEvent.objects.filter(trace__isnull=True).count() >= events > 0

    # Alice opens a new DM: nothing of the old one is found by history search or recall.
    world.runtime.say("dm-alice", "U200", "hello again")
    fresh = world.runtime.conversation("dm-alice")
    perspective = perspective_for_conversation(fresh, requester_id=world.runtime.actor("U200").pk)
    for text in ("Lisbon", "green tea", "manager Victor"):
        result = search_history(perspective=perspective, query=HistoryQuery(text=text))
        found = {m.message_id for hit in result.hits for m in (hit.message, *hit.before, *hit.after)}
        assert not found & message_ids, text
        assert not any("Lisbon" in hit.message.body for hit in result.hits), text
    assert not world.recall_ids("dm-alice", "U200", "Do I live in Lisbon and drink green tea?") & revision_ids

    # What was learned elsewhere, and the other conversations, are untouched.
    assert MemoryEntry.objects.filter(pk=world.revisions["launch"].entry_id, status="live").exists()
    assert world.revisions["launch"].pk in world.recall_ids("general", "U100", "When is the atlas launch?")
    general_turn = Turn.objects.filter(session__conversation__external_thread_id="general").first()
    assert general_turn is not None
    assert world.client(world.alice).get(f"/turns/{general_turn.pk}/").status_code == 200
    assert world.client(world.alice).get(f"/turns/{world.turn.pk}/").status_code == 404


def test_an_entry_amended_in_a_deleted_conversation_goes_whole(world: World) -> None:
    """The launch date was learned in #general and amended in Alice's DM: its current revision is
    built from the deleted messages, and rolling back to the superseded one would silently revive an
    outdated belief, so the entry goes whole (and so would anything derived from it)."""
    launch = world.revisions["launch"]
    turn = world.runtime.turn("dm-alice", "U200", "The atlas launch moved to March 10.")
    response = world.runtime.round(
        turn["turn_id"], {"verb": "amend", "id": launch.short_id, "body": "The atlas launch is on March 10."}
    )
    assert response.json()["results"][0]["status"] == "ok"

    conversation_delete(conversation=world.runtime.conversation("dm-alice"))

    assert not MemoryEntry.objects.filter(pk=launch.entry_id).exists()
    assert not MemoryRevision.objects.filter(entry_id=launch.entry_id).exists()
    assert Message.objects.filter(conversation__external_thread_id="general").exists()


# --- recall misses --------------------------------------------------------------------------------


def test_repeated_recall_misses_for_a_subject_are_counted(world: World) -> None:
    alice = world.runtime.actor("U200")
    dm = world.runtime.conversation("dm-alice")

    def ask(text: str, *, requester: int | None = alice.pk, profile: str = "task") -> int:
        result = recall(
            perspective=perspective_for_conversation(dm, requester_id=requester),
            query=form_query(message=text, requester_id=requester),
            budget=task_budget(),
            profile=profile,
        )
        return len(result.items)

    earlier = RecallMiss.objects.filter(subject=alice).values_list("count", flat=True).first() or 0
    assert ask("What is my passport number?") == 0
    assert ask("Which passport number did I give you?") == 0
    miss = RecallMiss.objects.get(agent=world.runtime.agent, subject=alice)
    assert miss.count == earlier + 2 and miss.last_missed_at <= timezone.now()

    assert ask("Where do I live, Lisbon?") > 0  # a hit is not a miss
    assert RecallQuery("what's new?").empty
    ask("what's new?")  # an empty query asks for nothing in particular
    ask("What is my passport number?", requester=None)  # nobody to attribute the miss to
    ask("What is my passport number?", profile="core")  # snapshots are not searches
    assert RecallMiss.objects.get(pk=miss.pk).count == earlier + 2
    assert not RecallMiss.objects.exclude(agent=world.runtime.agent).exists()
