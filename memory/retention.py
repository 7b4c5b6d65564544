"""Retention: the two tiers of a recall trace, and the one sanctioned deletion path.

**Trace retention.** A ``RecallTrace`` holds operator fields (query text, arms and latencies,
candidate and dropped ids) that matter only inside the tuning window, and user-safe fields (what was
rendered, its items, counts, the moment) that explain a turn to the person who had it.
:func:`trace_operator_fields_expire` nulls the operator fields after
``ENGRAM_TRACE_OPERATOR_RETENTION_DAYS`` (a daily Celery task); the user-safe fields live as long as
the session they explain and are deleted with it.

**Conversation deletion.** :func:`conversation_delete` is the only code that deletes immutable
rows. In one transaction, with exactly the append-only triggers it must pass ignored and only
inside it, it removes the conversation and everything derived from it, so that nothing of it stays
searchable or recallable:

- its messages with their source evidence, search documents (a cascading key), embeddings and
  index outbox rows;
- its sessions (and their child runs), turns, recall traces and trace items;
- every memory whose evidence came from those messages, and every memory derived from one of those
  (amended from it, superseding it, or inheriting it as evidence), whole entries at a time: entries,
  revisions, evidence, search documents, embeddings, outbox rows, conflicts, sharing requests and
  grants, ledger rows, rejections, and the items of any other trace that showed them.

Audit rows that hold only ids and digests stay, detached from what was deleted: retrieval events
(``trace`` set null) and history search events (``turn`` set null). Replies elsewhere that were
built from deleted messages keep their provenance ids; the lineage walk treats a missing id as
unknown, so such replies become disclosable nowhere.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

import pgtrigger
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone

from history.models import Conversation, ConversationSearchEvent, Message, MessageSourceEvidence, Session, Turn
from memory.models import (
    IndexOutbox,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    OutboxTarget,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    RevisionConflict,
    SharingConsent,
    SharingGrant,
    SharingRequest,
)

# --------------------------------------------------------------------------------------------------
# trace retention
# --------------------------------------------------------------------------------------------------


@transaction.atomic
def trace_operator_fields_expire(*, now: datetime | None = None, retention_days: int | None = None) -> int:
    """Null the operator-only fields of traces older than the retention window; return how many.

    Idempotent: a trace already cleared keeps its first ``operator_fields_cleared_at``.
    """
    now = now or timezone.now()
    days = settings.ENGRAM_TRACE_OPERATOR_RETENTION_DAYS if retention_days is None else retention_days
    return RecallTrace.objects.filter(
        created_at__lt=now - timedelta(days=days), operator_fields_cleared_at__isnull=True
    ).update(
        query_text=None,
        query_hints=None,
        arms=None,
        candidate_ids=None,
        dropped_ids=None,
        operator_fields_cleared_at=now,
    )


# --------------------------------------------------------------------------------------------------
# conversation deletion
# --------------------------------------------------------------------------------------------------

#: The append-only guards the deletion passes, and only these. Two are for UPDATEs that detach
#: surviving rows (audit events, other users' rejections) from what is deleted.
DELETION_IGNORES = (
    "history.Message:append_only",
    "history.MessageSourceEvidence:append_only",
    "history.ConversationSearchEvent:append_only",
    "memory.MemoryRevision:append_only",
    "memory.MemoryEvidence:append_only",
    "memory.RecallTraceItem:append_only",
    "memory.RetrievalEvent:append_only",
    "memory.MemoryOperation:append_only",
    "memory.Rejection:append_only",
    "memory.SharingGrant:no_delete",
)

#: A bound on the derivation walk; each step is two queries, and real lineages are a few steps deep.
DERIVATION_STEPS = 1_000


@dataclass(frozen=True)
class DeletionPlan:
    conversation_id: int
    message_ids: frozenset[int]
    session_ids: frozenset[int]
    turn_ids: frozenset[int]
    trace_ids: frozenset[int]
    entry_ids: frozenset[int]
    revision_ids: frozenset[int]

    def summary(self) -> dict[str, int]:
        return {
            "messages": len(self.message_ids),
            "sessions": len(self.session_ids),
            "turns": len(self.turn_ids),
            "traces": len(self.trace_ids),
            "memories": len(self.entry_ids),
            "memory revisions": len(self.revision_ids),
        }


def conversation_deletion_plan(conversation: Conversation) -> DeletionPlan:
    """Everything :func:`conversation_delete` would remove, as ids (reads only)."""
    message_ids = set(Message.objects.filter(conversation=conversation).values_list("pk", flat=True))
    session_ids = set(Session.objects.filter(conversation=conversation).values_list("pk", flat=True))
    frontier = set(session_ids)
    while frontier:  # child runs die with their parent session
        frontier = set(Session.objects.filter(parent_id__in=frontier).values_list("pk", flat=True)) - session_ids
        session_ids |= frontier
    turn_ids = set(
        Turn.objects.filter(Q(session_id__in=session_ids) | Q(inbound_message_id__in=message_ids)).values_list(
            "pk", flat=True
        )
    )
    trace_ids = set(
        RecallTrace.objects.filter(Q(session_id__in=session_ids) | Q(turn_id__in=turn_ids)).values_list("pk", flat=True)
    )
    seeds = set(MemoryEvidence.objects.filter(message_id__in=message_ids).values_list("revision_id", flat=True))
    seeds |= set(MemoryRevision.objects.filter(restricted_to_conversation=conversation).values_list("pk", flat=True))
    entry_ids, revision_ids = _derived_memories(seeds)
    return DeletionPlan(
        conversation_id=conversation.pk,
        message_ids=frozenset(message_ids),
        session_ids=frozenset(session_ids),
        turn_ids=frozenset(turn_ids),
        trace_ids=frozenset(trace_ids),
        entry_ids=frozenset(entry_ids),
        revision_ids=frozenset(revision_ids),
    )


def _derived_memories(seed_revisions: set[int]) -> tuple[set[int], set[int]]:
    """Whole entries holding a seed revision, plus every entry derived from one, to a fixed point."""
    entries: set[int] = set()
    revisions: set[int] = set()
    new_revisions = set(seed_revisions)
    for _ in range(DERIVATION_STEPS):
        if not new_revisions:
            return entries, revisions
        new_entries = (
            set(MemoryRevision.objects.filter(pk__in=new_revisions).values_list("entry_id", flat=True)) - entries
        )
        entries |= new_entries
        grown = set(MemoryRevision.objects.filter(entry_id__in=new_entries).values_list("pk", flat=True))
        grown |= new_revisions
        derived = set(
            MemoryEvidence.objects.filter(parent_revision_id__in=grown).values_list("revision_id", flat=True)
        ) | set(MemoryRevision.objects.filter(supersedes_id__in=grown).values_list("pk", flat=True))
        revisions |= grown
        new_revisions = derived - revisions
    raise RuntimeError("the conversation's derived memories did not close; nothing was deleted")


@transaction.atomic
def conversation_delete(*, conversation: Conversation) -> DeletionPlan:
    """Delete ``conversation`` and everything derived from it (see the module docstring); return
    what was deleted. All or nothing."""
    conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
    plan = conversation_deletion_plan(conversation)
    messages, revisions, entries = plan.message_ids, plan.revision_ids, plan.entry_ids
    traces, turns = plan.trace_ids, plan.turn_ids
    items = set(
        RecallTraceItem.objects.filter(
            Q(trace_id__in=traces) | Q(revision_id__in=revisions) | Q(entry_id__in=entries)
        ).values_list("pk", flat=True)
    )
    requests = set(
        SharingRequest.objects.filter(Q(revision_id__in=revisions) | Q(conversation=conversation)).values_list(
            "pk", flat=True
        )
    )
    with pgtrigger.ignore(*DELETION_IGNORES):
        # Survivors first let go of what is about to disappear.
        _update(RetrievalEvent, "trace_id", traces, trace=None)
        _update(ConversationSearchEvent, "turn_id", turns, turn=None)
        _update(SharingRequest, "turn_id", turns, turn=None)
        _update(MemoryRevision, "turn_id", turns, turn=None)
        _delete(MemoryOperation, "turn_id", turns)
        memories_delete(entry_ids=entries, revision_ids=revisions, trace_item_ids=items, request_ids=requests)
        # Again for what no deleted memory reached (memories_delete does nothing without memories).
        _update(Rejection, "trace_item_id", items, trace_item=None)
        _delete(RecallTraceItem, "id", items)
        _delete(SharingGrant, "request_id", requests)
        _delete(SharingGrant, "conversation_id", {conversation.pk})  # grants into it admit nothing now
        _delete(SharingConsent, "request_id", requests)
        _delete(SharingRequest, "id", requests)
        _delete(RecallTrace, "id", traces)

        _delete(Turn, "id", turns)
        _delete(Session, "id", plan.session_ids)
        messages_delete(message_ids=messages)
        _delete(Conversation, "id", {conversation.pk})
    return plan


def memories_delete(
    *,
    entry_ids: Collection[int],
    revision_ids: Collection[int],
    trace_item_ids: Collection[int] = (),
    request_ids: Collection[int] = (),
) -> None:
    """Delete whole memory entries (``revision_ids`` are all of their revisions) with everything that
    hangs off them: evidence, search documents (a cascading key), embeddings and their outbox rows,
    conflicts, sharing requests and grants, ledger rows, rejections of them and trace items showing
    them. Rows that survive let go of them first.

    Part of the one sanctioned deletion path: callers are :func:`conversation_delete` and
    :mod:`memory.erasure`, inside their own transaction. Foreign keys are checked at commit, so
    whatever still points at these rows must be gone by then too.
    """
    entries, revisions = set(entry_ids), set(revision_ids)
    if not entries and not revisions:
        return
    items = set(trace_item_ids) | set(
        RecallTraceItem.objects.filter(Q(revision_id__in=revisions) | Q(entry_id__in=entries)).values_list(
            "pk", flat=True
        )
    )
    requests = set(request_ids) | set(
        SharingRequest.objects.filter(revision_id__in=revisions).values_list("pk", flat=True)
    )
    with pgtrigger.ignore(*DELETION_IGNORES):
        _update(Rejection, "trace_item_id", items, trace_item=None)
        _delete(Rejection, "revision_id", revisions)
        _delete(Rejection, "resulting_revision_id", revisions)
        _delete(RecallTraceItem, "id", items)
        _delete(MemoryOperation, "entry_id", entries)
        _delete(MemoryOperation, "revision_id", revisions)
        _delete(MemoryOperation, "previous_revision_id", revisions)
        _delete(SharingGrant, "revision_id", revisions)
        _delete(SharingGrant, "request_id", requests)
        _delete(SharingConsent, "request_id", requests)
        _delete(SharingRequest, "id", requests)
        _delete(RevisionConflict, "revision_a_id", revisions)
        _delete(RevisionConflict, "revision_b_id", revisions)
        _delete_outbox(OutboxTarget.REVISION, revisions)
        _delete(MemoryEvidence, "revision_id", revisions)
        _update(MemoryEntry, "id", entries, current_revision=None)
        _delete(MemoryRevision, "id", revisions)  # their search documents and embeddings cascade
        _delete(MemoryEntry, "id", entries)


def messages_delete(*, message_ids: Collection[int]) -> None:
    """Delete messages with their source evidence, search documents (a cascading key), embeddings and
    outbox rows. Turns answering them and memories built from them must go in the same transaction
    (the caller's); part of the one sanctioned deletion path."""
    messages = set(message_ids)
    if not messages:
        return
    with pgtrigger.ignore(*DELETION_IGNORES):
        _delete_outbox(OutboxTarget.MESSAGE, messages)
        _delete(MessageSourceEvidence, "message_id", messages)
        _delete(Message, "id", messages)  # their search documents and embeddings cascade


def _delete(model: type[models.Model], column: str, ids: Collection[int]) -> None:
    # Raw DELETEs: the ORM's collector would refuse PROTECT references this transaction is removing
    # itself, and the foreign keys are checked at commit, when everything is gone together.
    if ids:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {model._meta.db_table} WHERE {column} = ANY(%s::bigint[])", [sorted(ids)])


def _delete_outbox(target: str, ids: Collection[int]) -> None:
    if ids:
        IndexOutbox.objects.filter(target=target, target_id__in=sorted(ids)).delete()


def _update(model: type[models.Model], column: str, ids: Collection[int], **values: object) -> None:
    if ids:
        model._default_manager.filter(**{f"{column}__in": sorted(ids)}).update(**values)
