"""Erasure: a person's data on request, and rows past a tenant's retention period.

Both start from *seeds* (messages and memory revisions) and erase their closure, everything built from
them, to a fixed point:

- every memory revision with evidence from an erased message, whole entries at a time, and every
  memory derived from one of those (amended from it, superseding it, or inheriting it as evidence):
  rolling an entry back to an older revision would silently revive a belief that was replaced;
- every agent reply built from an erased message or memory (``history_message_ids``,
  ``memory_revision_ids``, ``cited_revision_ids``), and through those replies, what was built from
  them. The turn that delivered such a reply keeps its inbound message and is marked ``withheld``
  (``failure_code`` ``lineage_erased``): the reply's text depended on what was erased, so it is not
  kept anywhere, and nothing can show or recall it again;
- with each message and revision, what is derived from it: search documents (cascading keys),
  embeddings and their outbox rows, source evidence, sharing requests and grants, conflicts, ledger
  rows, rejections, trace items; turns answering an erased message with their traces;
- the user-safe text of surviving traces and session snapshots that showed an erased memory, or
  recalled for a turn that had erased messages in front of it, is replaced by :data:`REDACTED`
  (the operator fields are nulled with it).

A person is an actor and every actor a live identity link verifies as the same person. Erasing them
also erases the messages of conversations only they read (their direct messages, whole, through
:func:`memory.retention.conversation_delete`), memories about them (``subject``) or supplied by them
(any of ``source_actor_ids``), corrections they made (rejections, and the revisions those wrote), their identity
links and recall misses; the actor row stays (other rows keep pointing at its id) with its display name
replaced.

**Resumable.** An :class:`~memory.models.ErasureEvent` is the job and the tombstone. The plan (ids
only) is stored on it before anything is deleted; every later step is a transaction of its own that
deletes part of what is still pending, removes it from ``pending`` and adds to ``counts`` in the same
commit. A run killed at any point leaves a consistent database and a running event; running again
plans again (new rows that arrived meanwhile join the stored plan) and continues. When nothing is
pending the event completes: it keeps the counts, never content, and can no longer change.

This is part of the one sanctioned deletion path: it runs inside
``pgtrigger.ignore(*DELETION_IGNORES)`` through the helpers of :mod:`memory.retention`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import pgtrigger
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from accounts.models import Actor, IdentityLink, Tenant, UserActor
from accounts.services import actor_rename
from history.audience import AudienceKind
from history.models import Conversation, ConversationSearchEvent, Message, MessageDirection, Session, Turn, TurnState
from memory.models import (
    ErasureEvent,
    ErasureKind,
    ErasureState,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    RecallMiss,
    RecallMoment,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    SharingRequest,
)
from memory.retention import (
    DELETION_IGNORES,
    DERIVATION_STEPS,
    _delete,
    _derived_memories,
    _update,
    conversation_delete,
    conversation_deletion_plan,
    memories_delete,
    messages_delete,
)

#: What a redacted trace or snapshot shows instead of what it rendered.
REDACTED = "[withheld: erased on request]"
REDACTED_SHA256 = hashlib.sha256(REDACTED.encode()).hexdigest()
#: The failure code of a turn whose delivered reply was erased with what it was built from.
REPLY_ERASED_CODE = "lineage_erased"
#: The display name an erased person's actor row keeps.
ERASED_NAME = "Erased person"
DEFAULT_BATCH_SIZE = 200

PLAN_KEYS = ("conversations", "traces", "sessions", "entries", "rejections", "messages")


class Progress(Protocol):
    """Called once per step with its size; the returned callable is told how many items each batch did."""

    def __call__(self, step: str, total: int) -> Callable[[int], None]: ...


def no_progress(step: str, total: int) -> Callable[[int], None]:
    return lambda done: None


@dataclass(frozen=True)
class Seeds:
    """Where an erasure starts; :func:`erasure_plan` adds everything built from these."""

    agent_ids: frozenset[int]
    message_ids: frozenset[int] = frozenset()
    revision_ids: frozenset[int] = frozenset()
    #: Conversations erased whole (a person's direct messages).
    conversation_ids: frozenset[int] = frozenset()
    #: A person's own corrections.
    rejection_ids: frozenset[int] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.message_ids or self.revision_ids or self.conversation_ids or self.rejection_ids)


@dataclass
class ErasurePlan:
    """Ids only. ``messages``, ``entries`` and ``rejections`` are deleted, ``traces`` and ``sessions``
    redacted, ``conversations`` deleted whole."""

    ids: dict[str, set[int]] = field(default_factory=lambda: {key: set() for key in PLAN_KEYS})

    def summary(self) -> dict[str, int]:
        return {key: len(self.ids[key]) for key in PLAN_KEYS}

    def merge(self, stored: dict[str, list[int]]) -> None:
        for key in PLAN_KEYS:
            self.ids[key] |= set(stored.get(key, []))

    def stored(self) -> dict[str, list[int]]:
        return {key: sorted(self.ids[key]) for key in PLAN_KEYS if self.ids[key]}


# --------------------------------------------------------------------------------------------------
# planning (reads only)
# --------------------------------------------------------------------------------------------------


def erasure_plan(seeds: Seeds) -> ErasurePlan:
    """Everything an erasure from ``seeds`` removes or redacts (see the module docstring)."""
    plan = ErasurePlan()
    agents = sorted(seeds.agent_ids)
    messages = set(seeds.message_ids)
    for conversation in Conversation.objects.filter(pk__in=seeds.conversation_ids, agent_id__in=agents):
        messages |= conversation_deletion_plan(conversation).message_ids
        plan.ids["conversations"].add(conversation.pk)
    revisions = set(seeds.revision_ids)
    entries: set[int] = set()
    for _ in range(DERIVATION_STEPS):
        revisions |= set(MemoryEvidence.objects.filter(message_id__in=messages).values_list("revision_id", flat=True))
        entries, revisions = _derived_memories(revisions)
        replies = set(
            Message.objects.filter(agent_id__in=agents, direction=MessageDirection.OUTBOUND)
            .filter(
                Q(history_message_ids__overlap=sorted(messages))
                | Q(memory_revision_ids__overlap=sorted(revisions))
                | Q(cited_revision_ids__overlap=sorted(revisions))
            )
            .values_list("pk", flat=True)
        )
        if replies <= messages:
            break
        messages |= replies
    else:
        raise RuntimeError("the erasure's derived rows did not close; nothing was erased")
    plan.ids["messages"] = messages
    plan.ids["entries"] = entries
    plan.ids["rejections"] = set(seeds.rejection_ids)
    traces = set(
        RecallTrace.objects.filter(agent_id__in=agents)
        .filter(
            Q(pk__in=RecallTraceItem.objects.filter(revision_id__in=revisions).values("trace_id"))
            | Q(turn__inbound_message_id__in=messages)
            | Q(turn__loaded_message_ids__overlap=sorted(messages))
            | Q(turn__evidence_message_ids__overlap=sorted(messages))
        )
        .values_list("pk", flat=True)
    )
    plan.ids["traces"] = traces
    plan.ids["sessions"] = set(
        RecallTrace.objects.filter(
            pk__in=traces, moment__in=[RecallMoment.SNAPSHOT, RecallMoment.CHILD], session__isnull=False
        ).values_list("session_id", flat=True)
    )
    return plan


def person_actors(actor: Actor) -> list[Actor]:
    """The person: ``actor`` and every actor a live identity link verifies as the same person."""
    linked = IdentityLink.objects.filter(revoked_at__isnull=True).filter(Q(actor_a=actor) | Q(actor_b=actor))
    ids = {actor.pk} | {i for pair in linked.values_list("actor_a_id", "actor_b_id") for i in pair}
    return list(Actor.objects.filter(pk__in=ids, tenant_id=actor.tenant_id).order_by("pk"))


def person_seeds(actor: Actor) -> Seeds:
    """A person's rows: what they wrote, their direct conversations, memories about or from them, and
    their corrections (with what those wrote)."""
    actors = [a.pk for a in person_actors(actor)]
    agents = frozenset(Actor.objects.filter(pk__in=actors).values_list("connector__agent_id", flat=True))
    users = list(UserActor.objects.filter(actor_id__in=actors).values_list("user_id", flat=True))
    own_conversations = Conversation.objects.filter(
        agent_id__in=agents,
        audience_kind__in=[AudienceKind.MEMBERS, AudienceKind.EXTERNAL],
        audience_readers__len__gt=0,
        audience_readers__contained_by=actors,
    )
    rejections = Rejection.objects.filter(agent_id__in=agents, user_id__in=users)
    revisions = set(
        MemoryRevision.objects.filter(agent_id__in=agents)
        .filter(Q(subject_id__in=actors) | Q(source_actor_ids__overlap=list(actors)) | Q(created_by_user_id__in=users))
        .values_list("pk", flat=True)
    ) | {r for r in rejections.values_list("resulting_revision_id", flat=True) if r is not None}
    return Seeds(
        agent_ids=agents,
        message_ids=frozenset(
            Message.objects.filter(agent_id__in=agents, actor_id__in=actors).values_list("pk", flat=True)
        ),
        revision_ids=frozenset(revisions),
        conversation_ids=frozenset(own_conversations.values_list("pk", flat=True)),
        rejection_ids=frozenset(rejections.values_list("pk", flat=True)),
    )


@dataclass(frozen=True)
class RetentionCutoffs:
    messages_before: datetime | None
    memories_before: datetime | None


def retention_cutoffs(tenant: Tenant, *, now: datetime | None = None) -> RetentionCutoffs:
    now = now or timezone.now()
    return RetentionCutoffs(
        messages_before=now - timedelta(days=tenant.message_retention_days)
        if tenant.message_retention_days is not None
        else None,
        memories_before=now - timedelta(days=tenant.memory_retention_days)
        if tenant.memory_retention_days is not None
        else None,
    )


def retention_seeds(tenant: Tenant, *, now: datetime | None = None) -> Seeds:
    """A tenant's rows past its retention periods: messages written before the message cutoff, and
    memories whose newest revision was stored before the memory cutoff."""
    cutoffs = retention_cutoffs(tenant, now=now)
    agents = frozenset(tenant.agents.values_list("pk", flat=True))
    messages: frozenset[int] = frozenset()
    revisions: frozenset[int] = frozenset()
    if cutoffs.messages_before is not None:
        messages = frozenset(
            Message.objects.filter(agent_id__in=agents, created_at__lt=cutoffs.messages_before).values_list(
                "pk", flat=True
            )
        )
    if cutoffs.memories_before is not None:
        stale = (
            MemoryRevision.objects.filter(agent_id__in=agents)
            .values("entry_id")
            .annotate(newest=Max("created_at"))
            .filter(newest__lt=cutoffs.memories_before)
            .values("entry_id")
        )
        revisions = frozenset(MemoryRevision.objects.filter(entry_id__in=stale).values_list("pk", flat=True))
    return Seeds(agent_ids=agents, message_ids=messages, revision_ids=revisions)


# --------------------------------------------------------------------------------------------------
# running (resumable)
# --------------------------------------------------------------------------------------------------


@dataclass
class ErasureRun:
    """One pass over a running event. ``pause`` (fault tests only) is called inside the transaction of
    the message batch after ``pause_after`` committed ones, before it commits."""

    event: ErasureEvent
    seeds: Callable[[], Seeds]
    batch_size: int = DEFAULT_BATCH_SIZE
    progress: Progress = no_progress
    finish: Callable[[], dict[str, int]] | None = None
    pause_after: int | None = None
    pause: Callable[[], None] | None = None

    def run(self) -> ErasureEvent:
        self._plan()
        self._conversations()
        self._redact()
        self._memories()
        self._messages()
        return self._complete()

    # -- steps ------------------------------------------------------------------------------------

    def _plan(self) -> None:
        with transaction.atomic():
            event = self._locked()
            plan = erasure_plan(self.seeds())
            plan.merge(event.pending)
            event.pending = plan.stored()
            event.save(update_fields=["pending"])
            self.event = event

    def _conversations(self) -> None:
        pending = self._pending("conversations")
        tick = self.progress("conversations", len(pending))
        for conversation_id in pending:
            with transaction.atomic():
                event = self._locked()
                counts: dict[str, int] = {}
                conversation = Conversation.objects.filter(pk=conversation_id).first()
                if conversation is not None:
                    deleted = conversation_delete(conversation=conversation)
                    counts = {
                        "conversations": 1,
                        **{f"{k} (with conversations)": v for k, v in deleted.summary().items()},
                    }
                self._done(event, "conversations", [conversation_id], counts)
            tick(1)

    def _redact(self) -> None:
        for key, model in (("traces", RecallTrace), ("sessions", Session)):
            pending = self._pending(key)
            tick = self.progress(f"{key} redacted", len(pending))
            for batch in _batches(pending, self.batch_size):
                with transaction.atomic():
                    event = self._locked()
                    if model is RecallTrace:
                        changed = RecallTrace.objects.filter(pk__in=batch).update(
                            rendered_text=REDACTED,
                            rendered_sha256=REDACTED_SHA256,
                            corrections=[],
                            query_text=None,
                            query_hints=None,
                            arms=None,
                            candidate_ids=None,
                            dropped_ids=None,
                            operator_fields_cleared_at=timezone.now(),
                        )
                    else:
                        changed = Session.objects.filter(pk__in=batch).update(
                            snapshot_text=REDACTED, snapshot_sha256=REDACTED_SHA256
                        )
                    self._done(event, key, batch, {f"{key} redacted": changed})
                tick(len(batch))

    def _memories(self) -> None:
        # One transaction: entries hold each other (evidence, supersession) with keys checked at commit.
        entries, rejections = self._pending("entries"), self._pending("rejections")
        tick = self.progress("memories", len(entries))
        with transaction.atomic():
            event = self._locked()
            revisions = set(MemoryRevision.objects.filter(entry_id__in=entries).values_list("pk", flat=True))
            existing_entries = set(MemoryRevision.objects.filter(pk__in=revisions).values_list("entry_id", flat=True))
            existing_rejections = set(Rejection.objects.filter(pk__in=rejections).values_list("pk", flat=True))
            with pgtrigger.ignore(*DELETION_IGNORES):
                _delete(Rejection, "id", existing_rejections)
                memories_delete(entry_ids=existing_entries, revision_ids=revisions)
            self._done(
                event, "entries", entries, {"memories": len(existing_entries), "memory revisions": len(revisions)}
            )
            self._done(event, "rejections", rejections, {"rejections": len(existing_rejections)})
        tick(len(entries))

    def _messages(self) -> None:
        pending = self._pending("messages")
        existing = set(Message.objects.filter(pk__in=pending).values_list("pk", flat=True))
        if len(existing) < len(pending):  # gone with a whole conversation, or in a run before
            with transaction.atomic():
                self._done(self._locked(), "messages", [i for i in pending if i not in existing], {})
            pending = [i for i in pending if i in existing]
        tick = self.progress("messages", len(pending))
        for number, batch in enumerate(_batches(pending, self.batch_size)):
            with transaction.atomic():
                event = self._locked()
                counts = _messages_erase(set(batch))
                if self.pause is not None and self.pause_after is not None and number == self.pause_after:
                    self.pause()
                self._done(event, "messages", batch, counts)
            tick(len(batch))

    def _complete(self) -> ErasureEvent:
        with transaction.atomic():
            event = self._locked()
            counts = self.finish() if self.finish is not None else {}
            _add(event.counts, counts)
            event.pending = {}
            event.state = ErasureState.COMPLETE
            event.completed_at = timezone.now()
            event.save(update_fields=["counts", "pending", "state", "completed_at"])
            self.event = event
        return event

    # -- helpers ----------------------------------------------------------------------------------

    def _locked(self) -> ErasureEvent:
        return ErasureEvent.objects.select_for_update().get(pk=self.event.pk)

    def _pending(self, key: str) -> list[int]:
        self.event.refresh_from_db(fields=["pending"])
        return list(self.event.pending.get(key, []))

    def _done(self, event: ErasureEvent, key: str, ids: Collection[int], counts: dict[str, int]) -> None:
        gone = set(ids)
        remaining = [i for i in event.pending.get(key, []) if i not in gone]
        if remaining:
            event.pending[key] = remaining
        else:
            event.pending.pop(key, None)
        _add(event.counts, counts)
        event.save(update_fields=["pending", "counts"])
        self.event = event


def _messages_erase(messages: set[int]) -> dict[str, int]:
    """Delete these messages, the turns answering them (with their traces and ledgers), and withhold
    the turns whose reply is among them. The memories built from them are already gone."""
    messages = set(Message.objects.filter(pk__in=messages).values_list("pk", flat=True))
    turns = set(Turn.objects.filter(inbound_message_id__in=messages).values_list("pk", flat=True))
    traces = set(RecallTrace.objects.filter(turn_id__in=turns).values_list("pk", flat=True))
    items = set(RecallTraceItem.objects.filter(trace_id__in=traces).values_list("pk", flat=True))
    withheld = Turn.objects.filter(reply_id__in=messages).exclude(pk__in=turns)
    with pgtrigger.ignore(*DELETION_IGNORES):
        withheld_count = withheld.update(reply=None, state=TurnState.WITHHELD, failure_code=REPLY_ERASED_CODE)
        _update(Rejection, "trace_item_id", items, trace_item=None)
        _update(RetrievalEvent, "trace_id", traces, trace=None)
        _update(ConversationSearchEvent, "turn_id", turns, turn=None)
        _update(SharingRequest, "turn_id", turns, turn=None)
        _update(MemoryRevision, "turn_id", turns, turn=None)
        _delete(RecallTraceItem, "id", items)
        _delete(RecallTrace, "id", traces)
        _delete(MemoryOperation, "turn_id", turns)
        _delete(Turn, "id", turns)
        messages_delete(message_ids=messages)
    return {"messages": len(messages), "turns": len(turns), "replies withheld": withheld_count}


def _batches(ids: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(ids), max(1, size)):
        yield ids[start : start + size]


def _add(counts: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        if value:
            counts[key] = counts.get(key, 0) + value


# --------------------------------------------------------------------------------------------------
# the two services
# --------------------------------------------------------------------------------------------------


def _running_event(*, tenant_id: int, kind: str, actor_id: int | None, requested_by: str) -> ErasureEvent:
    with transaction.atomic():
        event = (
            ErasureEvent.objects.select_for_update()
            .filter(tenant_id=tenant_id, kind=kind, actor_id=actor_id, state=ErasureState.RUNNING)
            .first()
        )
        if event is None:
            event = ErasureEvent.objects.create(
                tenant_id=tenant_id, kind=kind, actor_id=actor_id, requested_by=requested_by[:200]
            )
        return event


def person_erase(
    *,
    actor: Actor,
    requested_by: str,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress = no_progress,
    pause_after: int | None = None,
    pause: Callable[[], None] | None = None,
) -> ErasureEvent:
    """Erase a person (``actor`` and the actors verified as the same person; see the module
    docstring) and return the completed tombstone. Resumes a running erasure of the same actor."""
    event = _running_event(
        tenant_id=actor.tenant_id, kind=ErasureKind.PERSON, actor_id=actor.pk, requested_by=requested_by
    )

    def finish() -> dict[str, int]:
        actors = person_actors(actor)
        ids = [a.pk for a in actors]
        links = IdentityLink.objects.filter(Q(actor_a_id__in=ids) | Q(actor_b_id__in=ids))
        link_count = links.count()
        links.delete()
        misses, _ = RecallMiss.objects.filter(subject_id__in=ids).delete()
        for person in actors:
            if person.display_name != ERASED_NAME:
                actor_rename(actor=person, display_name=ERASED_NAME)
        return {"identity links": link_count, "recall misses": misses, "actors renamed": len(actors)}

    return ErasureRun(
        event=event,
        seeds=lambda: person_seeds(actor),
        batch_size=batch_size,
        progress=progress,
        finish=finish,
        pause_after=pause_after,
        pause=pause,
    ).run()


def retention_plan(tenant: Tenant, *, now: datetime | None = None) -> ErasurePlan:
    """What :func:`retention_enforce` would erase now (reads only): the dry run."""
    return erasure_plan(retention_seeds(tenant, now=now))


def retention_enforce(
    *,
    tenant: Tenant,
    now: datetime | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress = no_progress,
) -> ErasureEvent | None:
    """Erase ``tenant``'s rows past its retention periods with the erasure cascade; None when there
    was nothing to erase and nothing to resume (no tombstone is written for nothing)."""
    running = ErasureEvent.objects.filter(
        tenant=tenant, kind=ErasureKind.RETENTION, state=ErasureState.RUNNING
    ).exists()
    if not running and retention_seeds(tenant, now=now).empty:
        return None
    event = _running_event(tenant_id=tenant.pk, kind=ErasureKind.RETENTION, actor_id=None, requested_by="retention")
    return ErasureRun(
        event=event, seeds=lambda: retention_seeds(tenant, now=now), batch_size=batch_size, progress=progress
    ).run()
