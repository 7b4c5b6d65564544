"""The memory verbs a round runs: each call's handler, bound to the round's context (the turn, the
round's number and the perspective bound from the stored turn, never from a verb's arguments), and
the payloads it answers with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accounts.selectors import actors_named_in
from config.errors import NotFound, ServiceError
from history.models import Conversation, Turn
from memory.models import EntryStatus, MemoryEntry, MemoryRevision, RecallMoment, parse_short_id, short_id
from memory.retrieval.candidates import hydrate
from memory.retrieval.eligibility import EligibleRevisions, Perspective
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.query import form_query
from memory.retrieval.safety import model_project
from memory.retrieval.service import RecallResult, recall, task_budget
from memory.services import KEEP, Belief, Provenance, entry_forget, memory_remember, revision_amend
from memory.sharing import sharing_request_create
from memory.turns.participants import resolve_subject, resolve_subjects
from memory.turns.sessions import recalled_revision_ids


@dataclass(frozen=True)
class VerbCall:
    verb: str
    args: dict[str, Any]


@dataclass
class CallResult:
    verb: str
    status: str  # ok | unchanged | error
    result: dict[str, Any] = field(default_factory=dict)
    code: str = ""
    message: str = ""


@dataclass(frozen=True)
class RoundContext:
    """What every call of one round shares: the turn, the round's number and the turn's perspective
    (bound once from the stored turn, never from a verb's arguments)."""

    turn: Turn
    number: int
    perspective: Perspective


def _provenance(turn: Turn, source_message_ids: Sequence[int] = ()) -> Provenance:
    turn.refresh_from_db(fields=["evidence_message_ids", "loaded_message_ids"])
    return Provenance.from_turn(
        turn, recalled_revision_ids=recalled_revision_ids(turn), source_message_ids=source_message_ids
    )


def _remember(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, round_number = context.turn, context.number
    # Read the turn's evidence first: a subject may be the author of a message this turn searched.
    provenance = _provenance(turn, args.get("source_message_ids", ()))
    belief = Belief(
        body=args["body"],
        belief_type=args.get("belief_type", "project_fact"),
        subject_id=resolve_subject(turn, reference=args.get("subject"), actor_id=args.get("subject_actor_id")),
        portability=args.get("portability", "portable"),
        confidence=args.get("confidence", 0.8),
        authority=args.get("authority", "user_stated"),
        salience=args.get("salience", 0.5),
        always_on=args.get("always_on", False),
        lifecycle=args.get("lifecycle", "active"),
        valid_from=args.get("valid_from"),
        valid_to=args.get("valid_to"),
    )
    written = memory_remember(
        agent=turn.agent, belief=belief, provenance=provenance, turn=turn, round_number=round_number
    )
    return CallResult("remember", "ok", result=_written(written.entry.pk, written.revision))


def _visible_entry(context: RoundContext, revision_ref: str) -> tuple[MemoryEntry, int]:
    """The entry a cited revision belongs to, if this turn may see that entry's current revision.

    Anything else (another agent's id, a memory this audience may not see, nonsense) is reported as
    an unknown memory: not allowed looks exactly like missing. Runs inside the verb's transaction and
    locks the entry, so the write that follows sees the current revision this check judged.
    """
    turn = context.turn
    revision_id = parse_short_id(revision_ref)
    revision = (
        MemoryRevision.objects.filter(pk=revision_id, agent_id=turn.agent_id).first()
        if revision_id is not None
        else None
    )
    if revision is None:
        raise ServiceError(f"no memory {revision_ref} in this conversation", code="unknown_memory")
    # Without the lock a concurrent amend can move the current revision between this check and the
    # write: a visible memory cited at an older revision would be reported unknown instead of stale.
    entry = MemoryEntry.objects.select_for_update().get(pk=revision.entry_id)
    if entry.status == EntryStatus.FORGOTTEN:
        raise ServiceError(f"memory {revision_ref} is already forgotten", code="already_forgotten")
    visible = hydrate(EligibleRevisions(context.perspective), [entry.current_revision_id or 0])
    if not visible:
        raise ServiceError(f"no memory {revision_ref} in this conversation", code="unknown_memory")
    return entry, revision.pk


def _amend(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, round_number = context.turn, context.number
    entry, revision_id = _visible_entry(context, args["id"])
    changes = {
        name: args[name]
        for name in ("belief_type", "portability", "confidence", "salience", "always_on", "valid_from", "valid_to")
        if name in args
    }
    provenance = _provenance(turn)
    subject_id: int | None = KEEP
    if args.get("subject") is not None or args.get("subject_actor_id") is not None:
        subject_id = resolve_subject(turn, reference=args.get("subject"), actor_id=args.get("subject_actor_id"))
    elif "subject_actor_id" in args:
        subject_id = None  # an explicit null: the subject is not resolved after all
    written = revision_amend(
        agent=turn.agent,
        entry_id=entry.pk,
        expected_revision_id=revision_id,
        provenance=provenance,
        body=args.get("body"),
        subject_id=subject_id,
        changes=changes,
        turn=turn,
        round_number=round_number,
    )
    result = _written(entry.pk, written.revision)
    result.update(previous_id=short_id(revision_id), subject_changed=written.subject_changed)
    return CallResult("amend", "ok", result=result)


def _forget(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, round_number = context.turn, context.number
    entry, _ = _visible_entry(context, args["id"])
    outcome = entry_forget(agent=turn.agent, entry_id=entry.pk, turn=turn, round_number=round_number)
    if not outcome.changed:
        raise ServiceError(f"memory {args['id']} is already forgotten", code="already_forgotten")
    return CallResult("forget", "ok", result={"entry_id": entry.pk, "forgotten": True})


def _request_sharing(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, round_number = context.turn, context.number
    entry, _ = _visible_entry(context, args["id"])
    target = Conversation.objects.filter(pk=args["conversation_id"], agent_id=turn.agent_id).first()
    if target is None:
        raise NotFound("conversation not found", code="conversation_not_found")
    revision = MemoryRevision.objects.get(pk=entry.current_revision_id or 0)
    request = sharing_request_create(turn=turn, revision=revision, target=target, round_number=round_number)
    return CallResult(
        "request_memory_sharing",
        "ok",
        result={
            "request_id": request.pk,
            "id": short_id(revision.pk),
            "state": request.state,
            "note": "Nothing is shared until everyone it rests on confirms: each person who said it,"
            " and the person it is about.",
            "consents": [
                {"actor_id": consent.actor_id, "role": consent.role, "state": consent.state}
                for consent in request.consents.order_by("pk")
            ],
        },
    )


def _recall(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, perspective = context.turn, context.perspective
    # Resolved like remember's subject, among the turn's participants only: naming someone else is
    # refused, never searched for.
    asked = resolve_subjects(turn, args.get("subjects", ()))
    query = form_query(
        message=args["query"],
        requester_id=turn.requester_id,
        known_actors=actors_named_in(turn.agent_id, args["query"]),
        as_of=args.get("as_of"),
        known_at=args.get("known_at"),
        asked_subject_ids=asked,
        belief_types=args.get("type_hints", ()),
    )
    result = recall(
        perspective=perspective,
        query=query,
        budget=task_budget(max_tokens=args.get("max_tokens"), max_items=args.get("max_items", 12)),
        moment=RecallMoment.TOOL,
        session=turn.session,
        turn=turn,
    )
    return CallResult("recall", "ok", result=recall_payload(result))


def _search_history(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn = context.turn
    result = search_history(
        perspective=context.perspective,
        query=HistoryQuery(
            text=args["query"],
            actor=args.get("actor"),
            conversation_id=args.get("conversation_id"),
            connector=args.get("connector"),
            since=args.get("since"),
            until=args.get("until"),
            limit=args.get("limit", 8),
        ),
        turn=turn,
    )
    payload = {
        "message_ids": result.message_ids,
        "blocked": result.blocked,
        "hits": [
            {
                "message": _message_payload(hit.message),
                "score": hit.score,
                "components": hit.components,
                "before": [_message_payload(m) for m in hit.before],
                "after": [_message_payload(m) for m in hit.after],
            }
            for hit in result.hits
        ],
    }
    if result.code:
        return CallResult(
            "search_history", "unchanged", code=result.code, message="the turn's evidence is full", result=payload
        )
    return CallResult("search_history", "ok", result=payload)


def _message_payload(message: Any) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "conversation_id": message.conversation_id,
        "actor_id": message.actor_id,
        "actor": message.actor,
        "direction": message.direction,
        "created_at": message.created_at.isoformat(),
        "body": message.body,
        "blocked": message.blocked or None,
    }


def _written(entry_id: int, revision: MemoryRevision) -> dict[str, Any]:
    return {"id": short_id(revision.pk), "entry_id": entry_id, "revision_id": revision.pk, "revision": revision.number}


def recall_payload(result: RecallResult) -> dict[str, Any]:
    return {
        "trace_id": result.trace_id,
        "block": result.rendered,
        "rendered_sha256": result.rendered_sha256,
        "tokens": result.tokens,
        "degradation": result.degradation,
        "items": [
            {
                "id": item.id,
                "entry_id": item.entry_id,
                "revision_id": item.revision_id,
                "statement": item.statement,
                "subject": {"actor_id": item.subject_id, "label": item.subject} if item.subject_id else None,
                "source": {"actor_id": item.source_actor_id, "label": item.source} if item.source_actor_id else None,
                "sources": [{"actor_id": actor_id, "label": label} for actor_id, label in item.sources],
                "belief_type": item.belief_type,
                "authority": item.authority,
                "confidence_band": item.confidence_band,
                "learned_in": model_project(item.origin_scope),
                "carried": item.carried,
                "recorded_at": item.recorded_at.isoformat(),
                "score": item.score,
                "components": item.components,
                "reason": item.reason,
                "conflicts": item.conflicts,
                "blocked": item.blocked or None,
            }
            for item in result.items
        ],
        "corrections": result.corrections,
    }


#: Each verb's handler: every call of a round runs one of these, in its own transaction.
HANDLERS: dict[str, Callable[[RoundContext, dict[str, Any]], CallResult]] = {
    "remember": _remember,
    "recall": _recall,
    "amend": _amend,
    "forget": _forget,
    "request_memory_sharing": _request_sharing,
    "search_history": _search_history,
}
