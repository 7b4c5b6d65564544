"""The turn lifecycle an agent runtime drives: open a session (frozen snapshot), start a turn
(in-turn recall), run at most three rounds of memory verbs, read the committed ledger, submit the
reply (claim guard, pre-delivery recheck, provenance).

The perspective is always bound from the turn: agent, destination audience and requester come from
stored rows, never from a verb's arguments. Every call of a round has been validated (by the API's
input serializers) before this module executes any of them, so a malformed call cannot leave an
earlier call's write committed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Actor, RuntimeAgent
from accounts.selectors import actors_named_in
from config.database.base import prepared_cursor
from config.errors import Conflict, NotFound, ServiceError, Unprocessable
from config.read_workers import read_workers
from config.rows import fetch_all, fetch_one, instances, select_list
from history.models import Conversation, Message, MessageDirection, Session, SessionKind, Turn, TurnState
from history.services import reply_record
from memory.claims import UnsupportedClaim, ledger_instruction, unsupported_claims
from memory.models import (
    EntryStatus,
    MemoryEntry,
    MemoryOperation,
    MemoryRevision,
    RecallMoment,
    parse_short_id,
    short_id,
)
from memory.retrieval.candidates import hydrate
from memory.retrieval.eligibility import (
    DISCLOSURE_ARGS,
    EligibleMessages,
    EligibleRevisions,
    Perspective,
    perspective_for_turn,
)
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.moments import session_snapshot, turn_recall
from memory.retrieval.query import form_query
from memory.retrieval.service import RecallResult, recall, task_budget
from memory.services import KEEP, Belief, Provenance, entry_forget, memory_remember, revision_amend
from memory.sharing import sharing_request_create

TOOLS = ("remember", "recall", "amend", "forget", "request_memory_sharing", "search_history")
MAX_ROUNDS = 3
MAX_CALLS_PER_ROUND = 8
#: Verbs that change no memory: each writes only its own audit rows (a recall's trace; a search's
#: event and the evidence it adds to the turn), so consecutive ones can run at the same time.
CONCURRENT_VERBS = frozenset({"recall", "search_history"})
MAX_LOADED_MESSAGES = 100
CITATION = re.compile(r"\[(m:[0-9a-f]{8,})\]")


# --------------------------------------------------------------------------------------------------
# sessions and turns
# --------------------------------------------------------------------------------------------------


def session_open(
    *,
    agent: RuntimeAgent,
    conversation_id: int,
    kind: str = SessionKind.INTERACTIVE,
    requester_id: int | None = None,
    goal: str = "",
    parent_session_id: int | None = None,
) -> tuple[Session, RecallResult | None]:
    conversation = Conversation.objects.filter(pk=conversation_id, agent=agent).first()
    if conversation is None:
        raise NotFound("conversation not found", code="conversation_not_found")
    if requester_id is not None and not Actor.objects.filter(pk=requester_id, connector__agent=agent).exists():
        raise NotFound("actor not found", code="actor_not_found")
    parent = None
    if parent_session_id is not None:
        parent = Session.objects.filter(pk=parent_session_id, agent=agent).first()
        if parent is None:
            raise NotFound("session not found", code="session_not_found")
        kind = SessionKind.CHILD
    elif kind == SessionKind.CHILD:
        raise Unprocessable("a child session names its parent session", code="parent_required")
    with transaction.atomic():
        session = Session.objects.create(agent=agent, conversation=conversation, kind=kind, parent=parent)
        snapshot = session_snapshot(session=session, requester_id=requester_id, goal=goal)
    session.refresh_from_db()
    return session, snapshot


#: Which of the given ids are the agent's messages.
AGENT_MESSAGES_SQL = "SELECT id FROM history_message WHERE agent_id = %s AND id = ANY(%s::bigint[])"


def turn_start(
    *, session: Session, inbound_message_id: int, loaded_message_ids: Sequence[int] = ()
) -> tuple[Turn, RecallResult]:
    inbound = fetch_one(Message, "x.id = %s AND x.conversation_id = %s", [inbound_message_id, session.conversation_id])
    if inbound is None or inbound.direction != MessageDirection.INBOUND or inbound.actor_id is None:
        raise NotFound("inbound message not found in this session's conversation", code="message_not_found")
    loaded = list(dict.fromkeys(loaded_message_ids))
    if len(loaded) > MAX_LOADED_MESSAGES:
        raise Unprocessable(f"at most {MAX_LOADED_MESSAGES} loaded messages", code="window_too_large")
    with prepared_cursor() as cursor:
        cursor.execute(AGENT_MESSAGES_SQL, [session.agent_id, loaded])
        known = {message_id for (message_id,) in cursor.fetchall()}
    if missing := [m for m in loaded if m not in known]:
        raise Unprocessable("unknown loaded messages", code="unknown_parent", detail={"message_ids": missing})
    conversation = session.conversation
    with transaction.atomic():
        turn = Turn(
            agent_id=session.agent_id,
            session=session,
            inbound_message=inbound,
            requester_id=inbound.actor_id,
            loaded_message_ids=loaded,
        )
        turn.set_audience(conversation.audience)
        turn.save()
        result = turn_recall(turn=turn)
    return turn, result


@functools.cache
def _session_sql() -> str:
    return (
        f"SELECT {select_list(Session, 's')}, {select_list(Conversation, 'c')}"
        f" FROM {Session._meta.db_table} s JOIN {Conversation._meta.db_table} c ON c.id = s.conversation_id"
        " WHERE s.id = %s AND s.agent_id = %s"
    )


@functools.cache
def _turn_sql(lock: bool) -> str:
    return (
        f"SELECT {select_list(Turn, 't')}, {select_list(Session, 's')}, {select_list(Conversation, 'c')}"
        f" FROM {Turn._meta.db_table} t JOIN {Session._meta.db_table} s ON s.id = t.session_id"
        f" JOIN {Conversation._meta.db_table} c ON c.id = s.conversation_id"
        " WHERE t.id = %s AND t.agent_id = %s" + (" FOR UPDATE OF t, c" if lock else "")
    )


def session_of_agent(agent: RuntimeAgent, session_id: int) -> Session | None:
    """The agent's session with its conversation, or None (another agent's session is missing)."""
    with prepared_cursor() as cursor:
        cursor.execute(_session_sql(), [session_id, agent.pk])
        row = cursor.fetchone()
    if row is None:
        return None
    session, conversation = instances((Session, Conversation), row)
    assert isinstance(session, Session) and isinstance(conversation, Conversation)
    session.conversation = conversation
    session.agent = agent
    return session


def turn_of_agent(agent: RuntimeAgent, turn_id: int, *, lock: bool = False) -> Turn | None:
    """The agent's turn with its session and conversation, or None (another agent's turn is missing).

    ``lock`` takes the row locks of the turn and its conversation (not of the session between them:
    a turn starting in the same session only needs to reference it).
    """
    with prepared_cursor() as cursor:
        cursor.execute(_turn_sql(lock), [turn_id, agent.pk])
        row = cursor.fetchone()
    if row is None:
        return None
    turn, session, conversation = instances((Turn, Session, Conversation), row)
    assert isinstance(turn, Turn) and isinstance(session, Session) and isinstance(conversation, Conversation)
    session.conversation = conversation
    session.agent = agent
    turn.session = session
    turn.agent = agent
    return turn


def tools_offered(turn: Turn) -> list[str]:
    """The verbs still available: none once the turn has used its last round or is closed."""
    return list(TOOLS) if turn.state == TurnState.OPEN and turn.rounds_used < MAX_ROUNDS else []


#: Every revision traced for a turn: its own recalls', and its session's snapshot (or child brief).
RECALLED_SQL = (
    "SELECT DISTINCT i.revision_id FROM memory_recalltraceitem i"
    " JOIN memory_recalltrace t ON t.id = i.trace_id"
    " WHERE t.turn_id = %(turn_id)s OR (t.session_id = %(session_id)s AND t.moment = ANY(%(moments)s::text[]))"
    " ORDER BY i.revision_id"
)


def recalled_revision_ids(turn: Turn) -> list[int]:
    """Every revision rendered to the model in this turn: the session snapshot and the turn's recalls."""
    with prepared_cursor() as cursor:
        cursor.execute(
            RECALLED_SQL,
            {
                "turn_id": turn.pk,
                "session_id": turn.session_id,
                "moments": [RecallMoment.SNAPSHOT.value, RecallMoment.CHILD.value],
            },
        )
        return [revision_id for (revision_id,) in cursor.fetchall()]


# --------------------------------------------------------------------------------------------------
# rounds of verbs
# --------------------------------------------------------------------------------------------------


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
class RoundResult:
    round: int
    results: list[CallResult]
    tools: list[str]
    final: bool


def round_run(*, turn: Turn, calls: Sequence[VerbCall]) -> RoundResult:
    """Execute one validated round. The round is counted by one conditional update of the turn row
    (which takes its lock), so two concurrent rounds cannot both be the third."""
    if not calls:
        raise Unprocessable("a round has at least one call", code="empty_round")
    if len(calls) > MAX_CALLS_PER_ROUND:
        raise Unprocessable(f"at most {MAX_CALLS_PER_ROUND} calls per round", code="too_many_calls")
    with prepared_cursor() as cursor:
        cursor.execute(
            "UPDATE history_turn SET rounds_used = rounds_used + 1"
            " WHERE id = %s AND state = %s AND rounds_used < %s RETURNING rounds_used",
            [turn.pk, TurnState.OPEN, MAX_ROUNDS],
        )
        counted = cursor.fetchone()
    if counted is None:
        state = Turn.objects.filter(pk=turn.pk).values_list("state", flat=True).get()
        if state != TurnState.OPEN:
            raise Conflict(f"the turn is {state}", code="turn_closed")
        raise Conflict(f"a turn has at most {MAX_ROUNDS} rounds; no tools remain", code="round_limit")
    number = turn.rounds_used = counted[0]
    context = RoundContext(turn=turn, number=number, perspective=perspective_for_turn(turn))
    results = _run_calls(context, calls)
    # The response describes the turn as this round left it; a reply submitted meanwhile closes
    # the turn, and the next round is refused then.
    tools = tools_offered(turn)
    return RoundResult(round=number, results=results, tools=tools, final=not tools)


@dataclass(frozen=True)
class RoundContext:
    """What every call of one round shares: the turn, the round's number and the turn's perspective
    (bound once from the stored turn, never from a verb's arguments)."""

    turn: Turn
    number: int
    perspective: Perspective


def _run_calls(context: RoundContext, calls: Sequence[VerbCall]) -> list[CallResult]:
    """Every call's result, in order. A group of consecutive reads runs side by side, its first call
    here and the others on read workers, each on its own connection; inside a caller's transaction
    (whose uncommitted rows another connection cannot see) every call runs here, one after another."""
    results: list[CallResult] = []
    for group in read_groups(calls):
        if len(group) > 1 and not connection.in_atomic_block:
            others = [read_workers.submit(_execute, context, call) for call in group[1:]]
            results.append(_execute(context, group[0]))
            results.extend(future.result() for future in others)
        else:
            results.extend(_execute(context, call) for call in group)
    return results


def read_groups(calls: Sequence[VerbCall]) -> list[list[VerbCall]]:
    """The round's calls in order, cut into groups that may run side by side: consecutive reads
    (``CONCURRENT_VERBS``) with at most one history search among them, so the turn's evidence budget
    is judged by one search at a time; every write is a group of its own, after the reads before it
    and before the reads after it (a ``remember`` records the evidence the searches before it found)."""
    groups: list[list[VerbCall]] = []
    for call in calls:
        last = groups[-1] if groups else []
        joins = (
            call.verb in CONCURRENT_VERBS
            and bool(last)
            and all(c.verb in CONCURRENT_VERBS for c in last)
            and not (call.verb == "search_history" and any(c.verb == "search_history" for c in last))
        )
        if joins:
            last.append(call)
        else:
            groups.append([call])
    return groups


def _execute(context: RoundContext, call: VerbCall) -> CallResult:
    handler = {
        "remember": _remember,
        "recall": _recall,
        "amend": _amend,
        "forget": _forget,
        "request_memory_sharing": _request_sharing,
        "search_history": _search_history,
    }[call.verb]
    try:
        with transaction.atomic():
            return handler(context, call.args)
    except ServiceError as error:
        status = "unchanged" if error.code in {"unknown_memory", "already_forgotten"} else "error"
        return CallResult(call.verb, status, code=error.code, message=error.message, result=error.detail)


def _provenance(turn: Turn) -> Provenance:
    turn.refresh_from_db(fields=["evidence_message_ids", "loaded_message_ids"])
    return Provenance.from_turn(turn, recalled_revision_ids=recalled_revision_ids(turn))


def _remember(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, round_number = context.turn, context.number
    belief = Belief(
        body=args["body"],
        belief_type=args.get("belief_type", "project_fact"),
        subject_id=args.get("subject_actor_id"),
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
        agent=turn.agent, belief=belief, provenance=_provenance(turn), turn=turn, round_number=round_number
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
    written = revision_amend(
        agent=turn.agent,
        entry_id=entry.pk,
        expected_revision_id=revision_id,
        provenance=_provenance(turn),
        body=args.get("body"),
        subject_id=args.get("subject_actor_id", KEEP),
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
            "note": "Nothing is shared until the person who said it confirms.",
        },
    )


def _recall(context: RoundContext, args: dict[str, Any]) -> CallResult:
    turn, perspective = context.turn, context.perspective
    query = form_query(
        message=args["query"],
        requester_id=turn.requester_id,
        known_actors=actors_named_in(turn.agent_id, args["query"]),
        as_of=args.get("as_of"),
        known_at=args.get("known_at"),
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
                "belief_type": item.belief_type,
                "authority": item.authority,
                "confidence_band": item.confidence_band,
                "learned_in": item.origin_scope,
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


# --------------------------------------------------------------------------------------------------
# ledger and reply
# --------------------------------------------------------------------------------------------------


@functools.cache
def _ledger_sql() -> str:
    table = MemoryOperation._meta.db_table
    return f"SELECT {select_list(MemoryOperation, 'o')} FROM {table} o WHERE o.turn_id = %s ORDER BY o.id"


def turn_ledger(turn: Turn) -> list[MemoryOperation]:
    """The turn's committed operations in the order they committed."""
    return fetch_all(MemoryOperation, _ledger_sql(), [turn.pk])


@dataclass(frozen=True)
class Delivered:
    reply: Message
    cited: list[str]
    ignored_citations: list[str]


def reply_submit(*, agent: RuntimeAgent, turn_id: int, body: str, cited_ids: Sequence[str] = ()) -> Delivered:
    """Guard, recheck and deliver the final reply, or fail/withhold the turn and say why.

    One transaction holds the turn and its conversation locked from the claim guard to delivery, so
    an audience change or a concurrent submission waits for it, and the recheck judges exactly what
    is delivered. A failed or withheld turn is committed as such before the error is raised.
    """
    if not body.strip():
        raise Unprocessable("a reply needs a body", code="empty_body")
    claims: list[UnsupportedClaim] = []
    reason = ""
    with transaction.atomic():
        turn = turn_of_agent(agent, turn_id, lock=True)
        if turn is None:
            raise NotFound("turn not found", code="not_found")
        if turn.state != TurnState.OPEN:
            raise Conflict(f"the turn is {turn.state}", code="turn_closed")
        operations = turn_ledger(turn)
        claims = unsupported_claims(body, operations)
        if claims:
            _close(turn, TurnState.FAILED, "claim_guard")
        else:
            recalled = recalled_revision_ids(turn)
            written = [op.revision_id for op in operations if op.revision_id]
            memory_ids = sorted({*recalled, *written})
            cited, ignored = _citations(body, cited_ids, set(memory_ids))
            history_ids = list(dict.fromkeys([*turn.loaded_message_ids, *turn.evidence_message_ids]))
            reason = _recheck(turn, memory_ids, cited, history_ids, operations)
            if reason:
                _close(turn, TurnState.WITHHELD, reason)
            else:
                now = timezone.now()
                reply = reply_record(
                    turn_conversation=turn.session.conversation,
                    body=body,
                    history_message_ids=history_ids,
                    memory_revision_ids=memory_ids,
                    cited_revision_ids=cited,
                    created_at=now,
                )
                turn.reply = reply
                _close(turn, TurnState.DELIVERED, "")
                _feed_back_usage(cited_ids=cited, recalled_ids=recalled, now=now)
    if claims:
        raise Unprocessable(
            "the reply claims memory changes that did not commit; the turn has failed",
            code="claim_guard_failed",
            detail={
                "claims": [{"kind": c.kind, "text": c.text} for c in claims],
                "ledger": ledger_instruction(operations),
            },
        )
    if reason:
        raise Conflict(
            "the reply was withheld: what it was built from changed", code="reply_withheld", detail={"reason": reason}
        )
    return Delivered(reply=reply, cited=[short_id(r) for r in cited], ignored_citations=ignored)


def _close(turn: Turn, state: str, code: str) -> None:
    turn.state = state
    turn.failure_code = code
    turn.completed_at = timezone.now()
    turn.save(update_fields=["state", "failure_code", "completed_at", "reply"])


def _citations(body: str, cited_ids: Sequence[str], allowed: set[int]) -> tuple[list[int], list[str]]:
    refs = list(dict.fromkeys([*CITATION.findall(body), *cited_ids]))
    cited: list[int] = []
    ignored: list[str] = []
    for ref in refs:
        revision_id = parse_short_id(ref)
        if revision_id is not None and revision_id in allowed:
            cited.append(revision_id)
        else:
            ignored.append(ref)  # the model cited something it was never shown in this turn
    return sorted(set(cited)), ignored


def _recheck(
    turn: Turn, memory_ids: list[int], cited: list[int], history_ids: list[int], operations: list[MemoryOperation]
) -> str:
    """Revalidate, just before delivery, everything the reply was built from. Returns why to withhold.

    ``turn.session.conversation`` was read, and locked, with the turn in the delivering transaction;
    the memories and messages are judged by one statement, through the same eligibility as recall
    and history search.
    """
    if turn.session.conversation.audience != turn.audience:
        return "audience_changed"
    perspective = perspective_for_turn(turn)
    revisions = EligibleRevisions(perspective)
    messages = EligibleMessages(perspective)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT engram_revisions_disclosable(%(el_agent)s, %(memory_ids)s::bigint[], {DISCLOSURE_ARGS}),"
            f" ARRAY(SELECT el.revision_id FROM ({revisions.sql()}) el"
            " WHERE el.revision_id = ANY(%(cited_ids)s::bigint[])),"
            f" (SELECT count(*) FROM {messages.owned()} WHERE m.id = ANY(%(history_ids)s::bigint[])"
            f" AND {messages.predicate()})",
            {**revisions.params(), "memory_ids": memory_ids, "cited_ids": cited, "history_ids": history_ids},
        )
        disclosable, current_cited, eligible_messages = cursor.fetchone()
    if memory_ids and not disclosable:
        return "memory_no_longer_disclosable"
    changed_here = {op.entry_id for op in operations}
    for revision_id in cited:
        if revision_id not in current_cited:
            entry_id = MemoryRevision.objects.filter(pk=revision_id).values_list("entry_id", flat=True).first()
            if entry_id not in changed_here:  # the turn may acknowledge its own amend or forget
                return "memory_changed"
    if eligible_messages != len(set(history_ids)):
        return "history_no_longer_disclosable"
    return ""


#: Usage feedback: citing a memory raises its utility; being shown and never used lowers it a little.
USED_UTILITY, UNUSED_UTILITY = 1.0, -0.1


def _feed_back_usage(*, cited_ids: list[int], recalled_ids: list[int], now: datetime) -> None:
    """Move ``last_used_at`` and utility only; confidence and evidence age are never touched.

    The entries of cited revisions count as used; the other entries the turn was shown, as unused. The
    entries are locked in id order before they are updated: replies delivered at the same time to
    turns that were shown the same memories would otherwise lock them in whatever order each update's
    plan reads them, and deadlock. The lock is the one the update itself takes (``FOR NO KEY UPDATE``),
    which lets the key-share locks of rows that reference an entry (a trace item being written by a
    turn that is recalling it) through; ``FOR UPDATE`` would wait for them, and deadlock with them.
    """
    with prepared_cursor() as cursor:
        cursor.execute(
            "WITH cited AS (SELECT entry_id FROM memory_memoryrevision WHERE id = ANY(%(cited)s::bigint[])),"
            " shown AS (SELECT entry_id FROM memory_memoryrevision WHERE id = ANY(%(shown)s::bigint[])),"
            " locked AS (SELECT l.id FROM memory_memoryentry l"
            " WHERE l.id IN (SELECT entry_id FROM cited UNION SELECT entry_id FROM shown)"
            " ORDER BY l.id FOR NO KEY UPDATE)"
            " UPDATE memory_memoryentry e"
            " SET utility = e.utility"
            " + CASE WHEN e.id IN (SELECT entry_id FROM cited) THEN %(used)s ELSE %(unused)s END,"
            " last_used_at = CASE WHEN e.id IN (SELECT entry_id FROM cited) THEN %(now)s ELSE e.last_used_at END"
            " FROM locked WHERE e.id = locked.id",
            {"cited": cited_ids, "shown": recalled_ids, "used": USED_UTILITY, "unused": UNUSED_UTILITY, "now": now},
        )
