"""Rounds of verbs: a turn runs at most ``MAX_ROUNDS`` rounds of at most ``MAX_CALLS_PER_ROUND`` calls,
consecutive reads side by side, each call in its own transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from config.database.base import prepared_cursor
from config.errors import Conflict, ServiceError, Unprocessable
from config.read_workers import read_workers
from history.models import Turn, TurnState
from memory.models import PERSON_BELIEF_TYPES
from memory.retrieval.eligibility import perspective_for_turn
from memory.turns.participants import turn_participants
from memory.turns.sessions import MAX_ROUNDS, tools_offered
from memory.turns.verbs import HANDLERS, CallResult, RoundContext, VerbCall

MAX_CALLS_PER_ROUND = 8
#: Verbs that change no memory: each writes only its own audit rows (a recall's trace; a search's
#: event and the evidence it adds to the turn), so consecutive ones can run at the same time.
CONCURRENT_VERBS = frozenset({"recall", "search_history"})


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
    _require_subjects(turn, calls)
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


def _require_subjects(turn: Turn, calls: Sequence[VerbCall]) -> None:
    """A belief about a person names whom it is about: refuse the whole round, before it is counted,
    when a ``remember`` of a person-typed belief names no subject, and tell the model who may be named."""
    unattributed = [
        index
        for index, call in enumerate(calls)
        if call.verb == "remember"
        and call.args.get("belief_type") in PERSON_BELIEF_TYPES
        and call.args.get("subject") is None
        and call.args.get("subject_actor_id") is None
    ]
    if unattributed:
        people = turn_participants(turn)
        raise ServiceError(
            "a preference, user_model_attr or relationship is about a person: name its subject"
            ' ("speaker" for the person talking, or a participant\'s external_id or actor id): '
            + ", ".join(f"{p.display_name} (external_id {p.external_id}, actor {p.actor_id})" for p in people[:20]),
            code="subject_required",
            detail={"calls": unattributed, "participants": [p.as_dict() for p in people]},
        )


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
    handler = HANDLERS[call.verb]
    try:
        with transaction.atomic():
            return handler(context, call.args)
    except ServiceError as error:
        status = "unchanged" if error.code in {"unknown_memory", "already_forgotten"} else "error"
        return CallResult(call.verb, status, code=error.code, message=error.message, result=error.detail)
