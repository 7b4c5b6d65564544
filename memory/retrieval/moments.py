"""The three retrieval moments, each a call of the one retrieval service with its own budget.

- **Session snapshot**: built once when a session opens, profile ``core``, no provisional beliefs,
  two thirds of its items reserved for durable beliefs about the people in the conversation. Its
  bytes are frozen on the session for the session's life (byte-stable prompt prefix).
- **In-turn recall**: profile ``task``, into the user turn; it adds the *delta* (beliefs written
  after the snapshot's watermark) and *correction lines* for snapshot items amended or forgotten
  since, so the frozen prefix is never rewritten yet never silently wrong.
- **Child runs**: a child session gets its own small snapshot budget, never a copy of the parent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Max

from accounts.selectors import actors_named_in
from config.database.base import prepared_cursor
from history.models import Message, Session, SessionKind, Turn
from memory.models import EntryStatus, MemoryRevision, RecallMoment, short_id
from memory.retrieval.arms import CandidateProvider
from memory.retrieval.candidates import hydrate
from memory.retrieval.eligibility import (
    EligibleRevisions,
    Perspective,
    perspective_for_conversation,
    perspective_for_turn,
)
from memory.retrieval.query import RecallQuery, content_terms, form_query
from memory.retrieval.service import Budget, RecallResult, recall, task_budget

SNAPSHOT_BUDGETS = {
    SessionKind.INTERACTIVE: Budget(max_items=40, max_tokens=1_500),
    SessionKind.ASYNC: Budget(max_items=80, max_tokens=3_000),
    SessionKind.CHILD: Budget(max_items=15, max_tokens=500),
}
#: How many earlier messages of the conversation the query former may read.
RECENT_MESSAGES = 4


def store_head(agent_id: int) -> int:
    """The memory store's position: the newest revision id of the agent (0 when empty)."""
    return MemoryRevision.objects.filter(agent_id=agent_id).aggregate(head=Max("id"))["head"] or 0


# Inside a caller's transaction (opening a session) a failure fails the caller too: no savepoint.
@transaction.atomic(savepoint=False)
def session_snapshot(
    *, session: Session, requester_id: int | None, goal: str = "", providers: Sequence[CandidateProvider] | None = None
) -> RecallResult | None:
    """Take the session's frozen snapshot, once. Returns None if the session already has one."""
    session = Session.objects.select_for_update().select_related("conversation").get(pk=session.pk)
    if session.snapshot_sha256:
        return None
    # The watermark is the store head *before* the recall, so nothing written meanwhile is missed.
    watermark = store_head(session.agent_id)
    result = recall(
        perspective=perspective_for_conversation(session.conversation, requester_id=requester_id),
        query=RecallQuery(
            text=goal,
            subject_ids=(requester_id,) if requester_id is not None else (),
            include_provisional=False,
        ),
        budget=SNAPSHOT_BUDGETS[SessionKind(session.kind)],
        moment=RecallMoment.CHILD if session.kind == SessionKind.CHILD else RecallMoment.SNAPSHOT,
        profile="core",
        session=session,
        providers=providers,
        reserve_durable=True,
    )
    session.snapshot_text = result.rendered
    session.snapshot_sha256 = result.rendered_sha256
    session.watermark = watermark
    session.save(update_fields=["snapshot_text", "snapshot_sha256", "watermark"])
    return result


def turn_recall(
    *,
    turn: Turn,
    budget: Budget | None = None,
    providers: Sequence[CandidateProvider] | None = None,
) -> RecallResult:
    """In-turn recall for ``turn``'s inbound message, with the snapshot delta and correction lines."""
    session = turn.session
    perspective = perspective_for_turn(turn)
    inbound = turn.inbound_message
    # The query former reads the recent messages only when the inbound one carries no content terms
    # ("And then?"), and then looks for names in them; otherwise they are not read at all.
    recent: list[str] = []
    if not content_terms(inbound.body):
        recent = list(
            Message.objects.filter(conversation_id=inbound.conversation_id, created_at__lte=inbound.created_at)
            .exclude(pk=inbound.pk)
            .order_by("-created_at", "-id")
            .values_list("body", flat=True)[:RECENT_MESSAGES]
        )[::-1]
    query = form_query(
        message=inbound.body,
        recent_texts=recent,
        requester_id=turn.requester_id,
        known_actors=actors_named_in(turn.agent_id, "\n".join([inbound.body, *recent])),
    )
    has_snapshot = bool(session.snapshot_sha256)
    return recall(
        perspective=perspective,
        query=query,
        budget=budget or task_budget(),
        moment=RecallMoment.IN_TURN,
        profile="task",
        session=session,
        turn=turn,
        providers=providers,
        delta_after=session.watermark if has_snapshot else None,
        corrections=snapshot_corrections(session, perspective) if has_snapshot else (),
    )


#: The session snapshot's items whose entry has been forgotten or moved to another revision since, with
#: the entry's state and its current revision's recording time (fixed text, read at every turn start).
#: The snapshot trace is found through the (session, moment) index; ``OFFSET 0`` keeps the planner from
#: answering ``ORDER BY id LIMIT 1`` by walking the primary key past every other trace of the table.
SNAPSHOT_CHANGES_SQL = (
    "SELECT i.revision_id, e.status, e.forgotten_at, e.current_revision_id, r.recorded_at"
    " FROM memory_recalltraceitem i JOIN memory_memoryentry e ON e.id = i.entry_id"
    " LEFT JOIN memory_memoryrevision r ON r.id = e.current_revision_id"
    " WHERE i.trace_id = (SELECT s.id FROM (SELECT t.id FROM memory_recalltrace t"
    " WHERE t.session_id = %(session_id)s AND t.moment = ANY(%(moments)s::text[]) OFFSET 0) s ORDER BY s.id LIMIT 1)"
    " AND (e.status = %(forgotten)s OR e.current_revision_id IS DISTINCT FROM i.revision_id)"
    " ORDER BY i.revision_id"
)


def snapshot_corrections(session: Session, perspective: Perspective) -> list[str]:
    """One line per snapshot item amended or forgotten since the snapshot, in revision order.

    A successor is named only if this turn may see it; otherwise the line says only that the old
    belief no longer holds.
    """
    with prepared_cursor() as cursor:
        cursor.execute(
            SNAPSHOT_CHANGES_SQL,
            {
                "session_id": session.pk,
                "moments": [RecallMoment.SNAPSHOT.value, RecallMoment.CHILD.value],
                "forgotten": EntryStatus.FORGOTTEN.value,
            },
        )
        changed = cursor.fetchall()
    successors = [current for _, status, _, current, _ in changed if status == EntryStatus.LIVE and current is not None]
    visible = hydrate(EligibleRevisions(perspective), successors)
    lines = []
    for revision_id, status, forgotten_at, current, recorded_at in changed:
        old = f"[{short_id(revision_id)}]"
        if status == EntryStatus.FORGOTTEN and forgotten_at is not None:
            lines.append(f"correction: {old} no longer holds as of {_iso(forgotten_at)}; forgotten.")
            continue
        if current is None:
            continue
        named = f" by [{short_id(current)}]" if current in visible else ""
        lines.append(f"correction: {old} no longer holds as of {_iso(recorded_at)}; superseded{named}.")
    return lines


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
