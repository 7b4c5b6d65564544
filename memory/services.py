"""Writes for memories: remember, amend, forget. Each is atomic, keyword-only, and returns what the
store committed; each records itself in the committed ledger (``MemoryOperation``).

Provenance is never a model argument. Callers pass the ids of the authenticated source message and of
what the turn had loaded (history messages, recalled revisions); every one must exist in the agent's
own perspective, or the whole write is refused. The revision's source audience is computed from all
of them, most restrictive wins; an outbound reply contributes its own lineage as well, so a memory
formed from a reply cannot launder what the reply was built from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from accounts.models import Actor, RuntimeAgent
from config.errors import Conflict, NotFound, Unprocessable
from config.indexer import notify_indexer
from history.audience import Audience, most_restrictive
from history.models import Conversation, Message, MessageDirection, MessageSourceEvidence, Turn
from memory.conflicts import link_conflicts
from memory.fingerprint import is_rejected
from memory.models import (
    PERSON_BELIEF_TYPES,
    Authority,
    BeliefType,
    EntryStatus,
    EvidenceKind,
    Lifecycle,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    Operation,
    Portability,
    RevisionConflict,
    RevisionOrigin,
    short_id,
)


@dataclass(frozen=True)
class Correction:
    """A person's correction on the turn page, as evidence of the revision it writes.

    ``actor_id`` is the corrector's own actor in this perspective (the subject or the source), None
    for an operator, who is named by ``user``. ``restates``: the correction supplies the statement
    (*was true, has changed*), so the revision's source actor becomes the corrector; a scope
    correction (*true elsewhere, not here*) keeps the statement and its author.
    """

    user: AbstractBaseUser
    actor_id: int | None
    audience: Audience
    restates: bool


@dataclass(frozen=True)
class Provenance:
    """Where a write's content came from, as ids in the writing agent's perspective."""

    source_message_id: int | None = None
    inherited_message_ids: Sequence[int] = ()
    inherited_revision_ids: Sequence[int] = ()
    operator: AbstractBaseUser | None = None
    operator_audience: Audience | None = None
    correction: Correction | None = None
    #: Further messages the belief was learned from, after ``source_message_id``: their authors are
    #: source actors too. Each must already be among the write's messages (the turn's, see from_turn).
    also_source_message_ids: Sequence[int] = ()

    @property
    def source_message_ids(self) -> list[int]:
        """The messages the belief was learned from, in the order named, without repeats."""
        first = [self.source_message_id] if self.source_message_id is not None else []
        return list(dict.fromkeys([*first, *self.also_source_message_ids]))

    @classmethod
    def from_turn(
        cls,
        turn: Turn,
        *,
        recalled_revision_ids: Iterable[int] = (),
        source_message_ids: Sequence[int] = (),
    ) -> Provenance:
        """Everything a turn has seen: its inbound message, loaded and searched history, recalled memory.

        ``source_message_ids`` are the messages in front of the turn that the belief was learned from
        (default: the inbound message); any other id is refused with ``unknown_source_message``, so a
        model can name whose words a belief rests on but never invent a source.
        """
        in_front = dict.fromkeys([turn.inbound_message_id, *turn.loaded_message_ids, *turn.evidence_message_ids])
        named = list(dict.fromkeys(source_message_ids)) or [turn.inbound_message_id]
        if outside := [m for m in named if m not in in_front]:
            raise Unprocessable(
                "a belief is learned from messages in front of this turn: the inbound message, the loaded"
                " history or this turn's search results",
                code="unknown_source_message",
                detail={"message_ids": outside},
            )
        for message_id in named:
            in_front.pop(message_id, None)
        return cls(
            source_message_id=named[0],
            also_source_message_ids=tuple(named[1:]),
            inherited_message_ids=tuple(in_front),
            inherited_revision_ids=tuple(dict.fromkeys(recalled_revision_ids)),
        )


@dataclass(frozen=True)
class Belief:
    """The content of a revision. ``subject_id`` None means "not resolved yet"."""

    body: str
    belief_type: str = BeliefType.PROJECT_FACT
    subject_id: int | None = None
    portability: str = Portability.PORTABLE
    origin_scope: str | None = None  # None: the source conversation's project
    confidence: float = 0.8
    authority: str = Authority.USER_STATED
    salience: float = 0.5
    always_on: bool = False
    lifecycle: str = Lifecycle.ACTIVE
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    restricted_to_conversation_id: int | None = None


@dataclass(frozen=True)
class WriteResult:
    """What committed: the entry, the resulting revision, and the ledger row that records it."""

    entry: MemoryEntry
    revision: MemoryRevision
    operation: MemoryOperation
    previous_revision: MemoryRevision | None = None
    subject_changed: bool = False


@dataclass(frozen=True)
class ForgetResult:
    entry: MemoryEntry
    changed: bool
    operation: MemoryOperation | None = None


@dataclass
class _Source:
    kind: str
    audience: Audience
    message: Message | None = None
    parent_revision: MemoryRevision | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# remember / amend / forget
# --------------------------------------------------------------------------------------------------


@transaction.atomic
def memory_remember(
    *,
    agent: RuntimeAgent,
    belief: Belief,
    provenance: Provenance,
    turn: Turn | None = None,
    round_number: int | None = None,
    created_by: str = RevisionOrigin.REMEMBER,
) -> WriteResult:
    """Create a new entry and its revision 1. It never touches an existing entry.

    A statement an end user rejected as untrue (``memory.rejections``), or a rewording of it, is
    refused with ``rejected_belief``, whoever re-derives or imports it: a rejected belief never comes
    back. A belief that contradicts a live one the same readers can see is stored and linked to it as
    a conflict (:mod:`memory.conflicts`); neither is resolved.
    """
    sources = _resolve_sources(agent, provenance)
    _validate_belief(agent, belief)
    _require_subject(belief)
    _refuse_rejected(agent, belief)
    entry = MemoryEntry.objects.create(agent=agent)
    revision = _write_revision(
        agent=agent,
        entry=entry,
        number=1,
        belief=belief,
        sources=sources,
        provenance=provenance,
        turn=turn,
        created_by=created_by,
        previous=None,
    )
    entry.current_revision = revision
    entry.save(update_fields=["current_revision"])
    link_conflicts(revision)  # linked for review, never resolved here
    operation = MemoryOperation.objects.create(
        agent=agent,
        turn=turn,
        round=round_number,
        kind=Operation.REMEMBER,
        entry=entry,
        revision=revision,
        revision_number=revision.number,
    )
    return WriteResult(entry=entry, revision=revision, operation=operation)


#: Sentinel for "keep the previous value" in ``revision_amend``.
KEEP: Any = object()


@transaction.atomic
def revision_amend(
    *,
    agent: RuntimeAgent,
    entry_id: int,
    expected_revision_id: int,
    provenance: Provenance,
    body: str | None = None,
    subject_id: int | None = KEEP,
    changes: dict[str, Any] | None = None,
    turn: Turn | None = None,
    round_number: int | None = None,
    created_by: str = RevisionOrigin.AMEND,
) -> WriteResult:
    """Write revision N+1 of a live entry, if its current revision is still ``expected_revision_id``.

    Unchanged fields carry over. The new revision keeps the previous one's evidence (as an inherited
    revision) plus this write's sources. A stale expectation raises ``Conflict`` and writes nothing.
    """
    entry = _lock_live_entry(agent, entry_id)
    previous = entry.current_revision
    assert previous is not None  # a live entry always has one
    if previous.pk != expected_revision_id:
        raise Conflict(
            f"memory entry {entry.pk} is at revision {previous.short_id}, not {short_id(expected_revision_id)}",
            code="stale_revision",
            detail={"entry_id": entry.pk, "current_revision_id": previous.pk},
        )
    belief = _belief_of(previous)
    if body is not None:
        belief = replace(belief, body=body)
    if subject_id is not KEEP:
        belief = replace(belief, subject_id=subject_id)
    if changes:
        unknown = set(changes) - set(Belief.__dataclass_fields__) - {"body", "subject_id"}
        if unknown:
            raise Unprocessable(f"cannot amend {sorted(unknown)}", code="invalid_field")
        belief = replace(belief, **changes)
    if belief == _belief_of(previous):
        raise Unprocessable("the amendment changes nothing", code="no_change")
    _validate_belief(agent, belief)
    if (belief.belief_type, belief.subject_id) != (previous.belief_type, previous.subject_id):
        _require_subject(belief)  # an older subject-less belief stays amendable in its other fields
    if (belief.body.strip(), belief.subject_id) != (previous.body, previous.subject_id):
        _refuse_rejected(agent, belief)  # an amend must not restore a rejected statement either
    sources = [
        _Source(EvidenceKind.INHERITED_REVISION, previous.audience, parent_revision=previous),
        *_resolve_sources(agent, provenance, require_any=False),
    ]
    revision = _write_revision(
        agent=agent,
        entry=entry,
        number=previous.number + 1,
        belief=belief,
        sources=sources,
        provenance=provenance,
        turn=turn,
        created_by=created_by,
        previous=previous,
    )
    entry.current_revision = revision
    entry.save(update_fields=["current_revision"])
    link_conflicts(revision)  # linked for review, never resolved here
    subject_changed = revision.subject_id != previous.subject_id
    operation = MemoryOperation.objects.create(
        agent=agent,
        turn=turn,
        round=round_number,
        kind=Operation.AMEND,
        entry=entry,
        revision=revision,
        revision_number=revision.number,
        previous_revision=previous,
        subject_changed=subject_changed,
    )
    return WriteResult(
        entry=entry,
        revision=revision,
        operation=operation,
        previous_revision=previous,
        subject_changed=subject_changed,
    )


@transaction.atomic
def entry_forget(
    *, agent: RuntimeAgent, entry_id: int, turn: Turn | None = None, round_number: int | None = None
) -> ForgetResult:
    """Retire an entry from live retrieval, keeping every revision and its evidence.

    Forgetting an already-forgotten entry changes nothing and records nothing.
    """
    entry = MemoryEntry.objects.select_for_update().filter(agent=agent, pk=entry_id).first()
    if entry is None:
        raise NotFound(f"memory entry {entry_id} not found", code="memory_not_found")
    if entry.status == EntryStatus.FORGOTTEN:
        return ForgetResult(entry=entry, changed=False)
    entry.status = EntryStatus.FORGOTTEN
    entry.forgotten_at = timezone.now()
    entry.save(update_fields=["status", "forgotten_at"])
    operation = MemoryOperation.objects.create(
        agent=agent,
        turn=turn,
        round=round_number,
        kind=Operation.FORGET,
        entry=entry,
        revision=entry.current_revision,
        revision_number=entry.current_revision.number if entry.current_revision else None,
    )
    return ForgetResult(entry=entry, changed=True, operation=operation)


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def _lock_live_entry(agent: RuntimeAgent, entry_id: int) -> MemoryEntry:
    # No join in the locking statement: when it waits for a concurrent amend, PostgreSQL re-reads the
    # locked row only, and a joined current revision would be looked up in the snapshot taken before
    # the wait, where the revision that amend committed does not exist yet (a NULL, not a conflict).
    entry = MemoryEntry.objects.select_for_update().filter(agent=agent, pk=entry_id).first()
    if entry is None:
        raise NotFound(f"memory entry {entry_id} not found", code="memory_not_found")
    if entry.status == EntryStatus.FORGOTTEN:
        raise Conflict(f"memory entry {entry_id} is forgotten", code="memory_forgotten")
    entry.current_revision = MemoryRevision.objects.get(pk=entry.current_revision_id or 0)
    return entry


def _belief_of(revision: MemoryRevision) -> Belief:
    return Belief(
        body=revision.body,
        belief_type=revision.belief_type,
        subject_id=revision.subject_id,
        portability=revision.portability,
        origin_scope=revision.origin_scope,
        confidence=revision.confidence,
        authority=revision.authority,
        salience=revision.salience,
        always_on=revision.always_on,
        lifecycle=revision.lifecycle,
        valid_from=revision.valid_from,
        valid_to=revision.valid_to,
        restricted_to_conversation_id=revision.restricted_to_conversation_id,
    )


def _validate_belief(agent: RuntimeAgent, belief: Belief) -> None:
    if not belief.body.strip():
        raise Unprocessable("a memory needs a body", code="empty_body")
    if belief.belief_type not in BeliefType.values:
        raise Unprocessable(f"unknown belief type {belief.belief_type!r}", code="invalid_belief_type")
    if belief.portability not in Portability.values:
        raise Unprocessable(f"unknown portability {belief.portability!r}", code="invalid_portability")
    if belief.authority not in Authority.values:
        raise Unprocessable(f"unknown authority {belief.authority!r}", code="invalid_authority")
    if belief.lifecycle not in (Lifecycle.ACTIVE, Lifecycle.PROVISIONAL):
        raise Unprocessable("a new revision is active or provisional", code="invalid_lifecycle")
    if not (0 <= belief.confidence <= 1 and 0 <= belief.salience <= 1):
        raise Unprocessable("confidence and salience lie in [0, 1]", code="out_of_range")
    # Without valid_from the revision holds from now on (see _write_revision), so a valid_to in the
    # past is refused here rather than by the database's revision_valid_interval constraint.
    if belief.valid_to and belief.valid_to <= (belief.valid_from or timezone.now()):
        raise Unprocessable("valid_to must be after valid_from", code="invalid_validity")
    # The subject is a person this agent actually knows (through one of its connectors).
    if (
        belief.subject_id is not None
        and not Actor.objects.filter(pk=belief.subject_id, connector__agent=agent).exists()
    ):
        raise NotFound(f"actor {belief.subject_id} not found", code="subject_not_found")
    if (
        belief.restricted_to_conversation_id is not None
        and not Conversation.objects.filter(pk=belief.restricted_to_conversation_id, agent=agent).exists()
    ):
        raise NotFound("conversation not found", code="conversation_not_found")


def _require_subject(belief: Belief) -> None:
    if belief.belief_type in PERSON_BELIEF_TYPES and belief.subject_id is None:
        raise Unprocessable(
            f"a {belief.belief_type} is about a person: name its subject",
            code="subject_required",
            detail={"belief_type": belief.belief_type},
        )


def _refuse_rejected(agent: RuntimeAgent, belief: Belief) -> None:
    if is_rejected(agent_id=agent.pk, body=belief.body, subject_id=belief.subject_id):
        raise Unprocessable(
            "this statement was rejected as untrue (by its subject, its source or an operator); it is not stored again",
            code="rejected_belief",
        )


def _resolve_sources(agent: RuntimeAgent, provenance: Provenance, *, require_any: bool = True) -> list[_Source]:
    """Load every referenced parent in the agent's perspective; any foreign or missing id refuses the write."""
    sources: list[_Source] = []
    source_ids = provenance.source_message_ids
    message_ids = list(dict.fromkeys([*source_ids, *provenance.inherited_message_ids]))
    messages = {
        m.pk: m
        # With its conversation: a source message's project is the revision's origin scope.
        for m in Message.objects.filter(agent=agent, pk__in=message_ids)
        .select_related("conversation")
        .annotate(has_evidence=Exists(MessageSourceEvidence.objects.filter(message=OuterRef("pk"))))
    }
    missing_messages = [m for m in message_ids if m not in messages]
    revision_ids = list(dict.fromkeys(provenance.inherited_revision_ids))
    revisions = {r.pk: r for r in MemoryRevision.objects.filter(agent=agent, pk__in=revision_ids)}
    missing_revisions = [r for r in revision_ids if r not in revisions]
    if missing_messages or missing_revisions:
        raise Unprocessable(
            "the write names sources that do not exist in this agent's perspective",
            code="unknown_parent",
            detail={"message_ids": missing_messages, "revision_ids": missing_revisions},
        )
    lineage = _reply_lineage_audiences(
        agent, [m for m in messages.values() if m.direction == MessageDirection.OUTBOUND]
    )
    for message_id in message_ids:
        message = messages[message_id]
        audience = message.audience if message.has_evidence else Audience.unknown()
        if message.pk in lineage:
            audience = most_restrictive([audience, *lineage[message.pk]])
        kind = EvidenceKind.SOURCE_MESSAGE if message_id in source_ids else EvidenceKind.INHERITED_MESSAGE
        sources.append(_Source(kind, audience, message=message))
    for revision_id in revision_ids:
        revision = revisions[revision_id]
        sources.append(_Source(EvidenceKind.INHERITED_REVISION, revision.audience, parent_revision=revision))
    if provenance.operator is not None:
        if provenance.operator_audience is None:
            raise Unprocessable("an operator statement needs an audience", code="operator_audience_required")
        sources.append(_Source(EvidenceKind.OPERATOR, provenance.operator_audience))
    if provenance.correction is not None:
        sources.append(_Source(EvidenceKind.CORRECTION, provenance.correction.audience))
    if require_any and not sources:
        raise Unprocessable("a memory needs a source message or an operator statement", code="provenance_required")
    return sources


def _reply_lineage_audiences(agent: RuntimeAgent, replies: Sequence[Message]) -> dict[int, list[Audience]]:
    """For each outbound reply, the audiences of everything it was built from, transitively.

    The walk ran when the reply was inserted (``Message.lineage_*``, folded by the database): its
    ancestors' audiences (``unknown`` for a missing, foreign or unauthenticated ancestor, or past the
    caps). A conversation deleted since, or a used revision that is gone or not this agent's,
    contributes ``unknown`` too; used revisions contribute their own source audiences.
    """
    conversation_ids = {c for reply in replies for c in reply.lineage_conversation_ids}
    live_conversations = set(Conversation.objects.filter(pk__in=conversation_ids).values_list("pk", flat=True))
    revision_ids = {r for reply in replies for r in (*reply.lineage_revision_ids, *reply.memory_revision_ids)}
    # Only the audience columns: a reply's lineage may name many revisions, and a whole model row
    # (body, validity, provenance) would be built for each.
    revisions = {
        pk: Audience(kind, namespace, tuple(readers))
        for pk, kind, namespace, readers in MemoryRevision.objects.filter(agent=agent, pk__in=revision_ids).values_list(
            "pk", "audience_kind", "audience_namespace", "audience_readers"
        )
    }
    result: dict[int, list[Audience]] = {}
    for reply in replies:
        audiences = [Audience(kind, namespace, tuple(readers)) for kind, namespace, readers in reply.lineage_audiences]
        if not set(reply.lineage_conversation_ids) <= live_conversations:
            audiences.append(Audience.unknown())
        used = {*reply.lineage_revision_ids, *reply.memory_revision_ids}
        audiences.extend(revisions.get(r, Audience.unknown()) for r in sorted(used))
        result[reply.pk] = audiences
    return result


def _write_revision(
    *,
    agent: RuntimeAgent,
    entry: MemoryEntry,
    number: int,
    belief: Belief,
    sources: list[_Source],
    provenance: Provenance,
    turn: Turn | None,
    created_by: str,
    previous: MemoryRevision | None,
) -> MemoryRevision:
    source_messages = [s.message for s in sources if s.kind == EvidenceKind.SOURCE_MESSAGE and s.message is not None]
    origin_scope = belief.origin_scope
    if origin_scope is None:
        origin_scope = source_messages[0].conversation.project if source_messages else ""
    audience = most_restrictive(s.audience for s in sources)
    now = timezone.now()
    correction = provenance.correction
    source_actor_ids = _source_actors(source_messages, correction, previous)
    created_by_user = provenance.operator or (correction.user if correction is not None else None)
    revision = MemoryRevision(
        entry=entry,
        agent=agent,
        number=number,
        body=belief.body.strip(),
        subject_id=belief.subject_id,
        source_actor_id=source_actor_ids[0] if source_actor_ids else None,
        source_actor_ids=source_actor_ids,
        belief_type=belief.belief_type,
        portability=belief.portability,
        origin_scope=origin_scope,
        confidence=belief.confidence,
        authority=belief.authority,
        salience=belief.salience,
        always_on=belief.always_on,
        lifecycle=belief.lifecycle,
        valid_from=belief.valid_from or now,
        valid_to=belief.valid_to,
        recorded_at=now,
        supersedes=previous,
        restricted_to_conversation_id=belief.restricted_to_conversation_id,
        created_by=created_by,
        turn=turn,
        created_by_user=created_by_user,  # type: ignore[misc]
    )
    revision.set_audience(audience)
    revision.save()
    notify_indexer()  # the trigger queued its index work; ask a worker to pick it up after commit
    MemoryEvidence.objects.bulk_create(
        MemoryEvidence(
            revision=revision,
            kind=source.kind,
            message=source.message,
            parent_revision=source.parent_revision,
            operator=_evidence_operator(source.kind, provenance),  # type: ignore[misc]
            actor_id=correction.actor_id if correction is not None and source.kind == EvidenceKind.CORRECTION else None,
            audience_kind=source.audience.kind,
            audience_namespace=source.audience.namespace,
            audience_readers=list(source.audience.readers),
        )
        for source in sources
    )
    return revision


def _source_actors(
    source_messages: Sequence[Message], correction: Correction | None, previous: MemoryRevision | None
) -> list[int]:
    """Whose words a revision rests on, first-named first: the connector-authenticated authors of its
    source messages; for a restating correction without messages, the corrector (none: an operator);
    otherwise the previous revision's. An amendment from a turn keeps the previous source actors after
    the new ones: their statement is still part of what it says.
    """
    authors = [m.actor_id for m in source_messages if m.actor_id is not None]
    restated = correction is not None and correction.restates
    if restated and not authors:
        assert correction is not None
        return [correction.actor_id] if correction.actor_id is not None else []
    kept = list(previous.source_actor_ids) if previous is not None and not restated else []
    return list(dict.fromkeys([*authors, *kept]))


def _evidence_operator(kind: str, provenance: Provenance) -> AbstractBaseUser | None:
    if kind == EvidenceKind.OPERATOR:
        return provenance.operator
    if kind == EvidenceKind.CORRECTION and provenance.correction is not None and provenance.correction.actor_id is None:
        return provenance.correction.user  # an operator's correction: no actor of theirs, so name them
    return None


# --------------------------------------------------------------------------------------------------
# operator review
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewClearResult:
    entry: MemoryEntry
    changed: bool


@transaction.atomic
def entry_review_clear(*, agent: RuntimeAgent, entry_id: int) -> ReviewClearResult:
    """Take an entry off the review queue: ``flagged_for_review`` becomes false, so ranking stops
    down-weighting it. Its revisions, and the rejections that flagged it, stay as they are.

    Clearing an entry that is not flagged changes nothing (``changed`` false). An entry of another
    agent answers ``NotFound``, exactly like a missing one.
    """
    entry = MemoryEntry.objects.select_for_update().filter(agent=agent, pk=entry_id).first()
    if entry is None:
        raise NotFound(f"memory entry {entry_id} not found", code="memory_not_found")
    if not entry.flagged_for_review:
        return ReviewClearResult(entry=entry, changed=False)
    entry.flagged_for_review = False
    entry.save(update_fields=["flagged_for_review"])
    return ReviewClearResult(entry=entry, changed=True)


@dataclass(frozen=True)
class ConflictResolveResult:
    conflict: RevisionConflict
    changed: bool


@transaction.atomic
def conflict_resolve(*, agent: RuntimeAgent, conflict_id: int) -> ConflictResolveResult:
    """Mark a conflict between two revisions resolved (``resolved_at`` now): retrieval stops
    returning the pair together with a ``conflicts=`` marker. Neither revision changes; an operator
    who decides which one is true amends or forgets the other through the usual services.

    Resolving a resolved conflict changes nothing (``changed`` false, the first ``resolved_at``
    kept). A conflict of another agent answers ``NotFound``, exactly like a missing one.
    """
    conflict = RevisionConflict.objects.select_for_update().filter(agent=agent, pk=conflict_id).first()
    if conflict is None:
        raise NotFound(f"conflict {conflict_id} not found", code="conflict_not_found")
    if conflict.resolved_at is not None:
        return ConflictResolveResult(conflict=conflict, changed=False)
    conflict.resolved_at = timezone.now()
    conflict.save(update_fields=["resolved_at"])
    return ConflictResolveResult(conflict=conflict, changed=True)


__all__ = [
    "KEEP",
    "Belief",
    "ConflictResolveResult",
    "ForgetResult",
    "Provenance",
    "ReviewClearResult",
    "WriteResult",
    "conflict_resolve",
    "entry_forget",
    "entry_review_clear",
    "memory_remember",
    "revision_amend",
]
