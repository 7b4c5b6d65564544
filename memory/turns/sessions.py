"""Sessions and turns: open a session (its frozen snapshot), start a turn (in-turn recall), and read
an agent's session or turn back (another agent's answers missing), with the verbs still offered and
the revisions the turn was shown.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django.db import transaction

from accounts.models import Actor, RuntimeAgent
from config.database.base import prepared_cursor
from config.errors import NotFound, Unprocessable
from config.rows import fetch_one, instances, select_list
from history.models import Conversation, Message, MessageDirection, Session, SessionKind, Turn, TurnState
from memory.models import RecallMoment
from memory.retrieval.moments import session_snapshot, turn_recall
from memory.retrieval.service import RecallResult

TOOLS = ("remember", "recall", "amend", "forget", "request_memory_sharing", "search_history")
MAX_ROUNDS = 3


MAX_LOADED_MESSAGES = 100


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
