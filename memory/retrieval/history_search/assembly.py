"""Assembly for history search: the chosen hits hydrated with their eligible neighbours (read through
the eligible set again, each line through the safety scan), the turn's evidence grown and the search
audit written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from config.audit import audit_digest, read_audit_transaction
from config.database.base import prepared_cursor
from history.models import ConversationSearchEvent, Turn
from memory.retrieval.eligibility import EligibleMessages, Perspective
from memory.retrieval.history_search.query import Filters, HistoryQuery
from memory.retrieval.safety import block_reason, model_label

NEIGHBOURS = 2
#: Each hit can bring up to 2 + 2 neighbours: five messages of evidence.
MESSAGES_PER_HIT = 1 + 2 * NEIGHBOURS
#: Per-turn ceiling of distinct evidence messages; well under the lineage caps (500 history ids).
TURN_EVIDENCE_CEILING = 400


@dataclass(frozen=True)
class FoundMessage:
    """One transcript line as the agent is given it. ``blocked`` is why the safety scan withheld it
    ("" if it did not); a withheld line's ``body`` is the ``[BLOCKED]`` placeholder, never its text."""

    message_id: int
    conversation_id: int
    actor_id: int | None
    actor: str | None
    direction: str
    created_at: datetime
    body: str
    blocked: str = ""


@dataclass(frozen=True)
class Hit:
    message: FoundMessage
    score: float
    components: dict[str, float]
    before: list[FoundMessage] = field(default_factory=list)
    after: list[FoundMessage] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryResult:
    """``message_ids`` first: a result truncated mid-way still yields every id for provenance."""

    message_ids: list[int]
    hits: list[Hit]
    event_id: int
    code: str = ""  # "search_budget_exhausted" when the turn's evidence ceiling is reached
    exclusion_counts: dict[str, int] = field(default_factory=dict)
    degradation: str = ""
    #: Results (hits and neighbours) the safety scan withheld, counted once each.
    blocked: int = 0


def blocked_placeholder(reason: str) -> str:
    """What the agent reads instead of a withheld line (as memory recall renders a withheld item)."""
    return f"[BLOCKED] withheld: {reason}."


#: Each hit's neighbours are read as the neighbour lookup reads them: the conversation's messages from
#: its time index, nearest first, each judged by the eligible set in turn (a parameterised subquery,
#: OFFSET 0 keeping it one probe per message) until ``n`` pass. Judging every message on one side of
#: the hit and keeping the nearest two instead reads the whole conversation (replies' lineage included).
_HYDRATE_SIDE = """
    SELECT hit.message_id, {side}, judged.* FROM hit CROSS JOIN LATERAL (
        SELECT judged.* FROM (
            SELECT m.id, m.created_at FROM history_message m
            WHERE m.conversation_id = hit.conversation_id
              AND (m.created_at, m.id) {beyond} (hit.created_at, hit.message_id)
              AND NOT (m.id = ANY(%(q_excluded)s::bigint[]))
            ORDER BY m.created_at {order}, m.id {order} OFFSET 0) near
        CROSS JOIN LATERAL (SELECT em.* FROM em WHERE em.message_id = near.id OFFSET 0) judged
        ORDER BY near.created_at {order}, near.id {order} LIMIT {{n}}) judged"""
_HYDRATE = (
    """
WITH em AS NOT MATERIALIZED ({eligible}),
hit AS (SELECT em.* FROM em WHERE em.message_id = ANY(%(h_ids)s::bigint[])),
found AS (
    SELECT hit.message_id AS hit_id, 0 AS side, hit.* FROM hit
    UNION ALL"""
    + _HYDRATE_SIDE.format(side=-1, beyond="<", order="DESC")
    + """
    UNION ALL"""
    + _HYDRATE_SIDE.format(side=1, beyond=">", order="ASC")
    + """
)
SELECT found.*, actor.display_name AS actor_name, actor.external_id AS actor_external_id
FROM found LEFT JOIN accounts_actor actor ON actor.id = found.actor_id
"""
)


def hydrate(
    eligible: EligibleMessages,
    params: dict[str, Any],
    chosen: Sequence[tuple[float, int, dict[str, float]]],
    *,
    budget: int,
) -> list[Hit]:
    """Canonical text for the hits and their eligible neighbours, read through the eligible set again."""
    if not chosen:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _HYDRATE.format(eligible=eligible.sql(), n=NEIGHBOURS), {**params, "h_ids": [c[1] for c in chosen]}
        )
        columns = [c.name for c in cursor.description or ()]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    def found(row: dict[str, Any]) -> FoundMessage:
        # The safety scan, on every line the agent will be given (hit or neighbour), before it leaves.
        reason = block_reason(row["body"])
        return FoundMessage(
            message_id=row["message_id"],
            conversation_id=row["conversation_id"],
            actor_id=row["actor_id"],
            actor=model_label(row["actor_name"], row["actor_external_id"]) if row["actor_id"] else None,
            direction=row["direction"],
            created_at=row["created_at"],
            body=blocked_placeholder(reason) if reason else row["body"],
            blocked=reason,
        )

    by_hit: dict[int, dict[int, list[dict[str, Any]]]] = {}
    for row in rows:
        by_hit.setdefault(row["hit_id"], {}).setdefault(row["side"], []).append(row)
    hits: list[Hit] = []
    seen: set[int] = set()
    for score, message_id, components in chosen:
        parts = by_hit.get(message_id)
        if not parts or 0 not in parts:
            continue  # no longer eligible between ranking and hydration
        before = sorted(parts.get(-1, []), key=lambda r: (r["created_at"], r["message_id"]))
        after = sorted(parts.get(1, []), key=lambda r: (r["created_at"], r["message_id"]))
        new_ids = {r["message_id"] for r in [parts[0][0], *before, *after]} - seen
        if len(seen) + len(new_ids) > budget:
            # Near the turn's ceiling: keep the hit, drop neighbours that would overflow it.
            before, after = [], []
            new_ids = {message_id} - seen
            if len(seen) + len(new_ids) > budget:
                break
        seen |= new_ids
        hits.append(
            Hit(
                message=found(parts[0][0]),
                score=score,
                components=components,
                before=[found(r) for r in before],
                after=[found(r) for r in after],
            )
        )
    return hits


EVIDENCE_APPEND = """
UPDATE history_turn SET evidence_message_ids = evidence_message_ids || ARRAY(
    SELECT found.id FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS found(id, position)
    WHERE found.id <> ALL(evidence_message_ids) ORDER BY found.position)
WHERE id = %(turn)s RETURNING evidence_message_ids
"""


def finish(
    perspective: Perspective,
    query: HistoryQuery,
    turn: Turn | None,
    filters: Filters | None,
    hits: list[Hit],
    counts: dict[str, int],
    *,
    code: str = "",
    degradation: str = "",
) -> HistoryResult:
    message_ids: list[int] = []
    blocked_ids: list[int] = []
    for hit in hits:
        for message in [*hit.before, hit.message, *hit.after]:
            if message.message_id not in message_ids:
                message_ids.append(message.message_id)
                if message.blocked:
                    blocked_ids.append(message.message_id)
    with read_audit_transaction():
        if turn is not None and message_ids:
            # The turn's evidence grows in one update of its row (which takes the row lock), so
            # concurrent rounds cannot lose ids; new ids are appended in the order found.
            with prepared_cursor() as cursor:
                cursor.execute(EVIDENCE_APPEND, {"turn": turn.pk, "ids": message_ids})
                (turn.evidence_message_ids,) = cursor.fetchone()
        event = ConversationSearchEvent.objects.create(
            agent_id=perspective.agent_id,
            turn=turn,
            query_digest=audit_digest(query.text) if query.text else "",
            filters=filters.described if filters is not None else {"unresolved_filter": True},
            destination_audience=perspective.destination.as_dict(),
            selected=[{"message_id": hit.message.message_id, "score": hit.score, **hit.components} for hit in hits],
            exclusion_counts=counts,
            blocked_count=len(blocked_ids),
            blocked_message_ids=blocked_ids,
            returned_message_ids=message_ids,
            degradation=degradation,
        )
    return HistoryResult(
        message_ids=message_ids,
        hits=hits,
        event_id=event.pk,
        code=code,
        exclusion_counts=counts,
        degradation=degradation,
        blocked=len(blocked_ids),
    )
