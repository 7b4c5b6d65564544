"""The people a turn's model may name as a memory's subject, and how a subject it names is resolved.

A turn starts by listing the conversation's participants (actor id, external id, display name,
connector, and which one is speaking), so that the model can say whom a belief is about. A subject
the model names in ``remember`` or ``amend`` is resolved here, among those participants and the
authors of the messages in front of the turn (its loaded history and search results), and nowhere
else: an actor id outside them is refused (``subject_not_participant``), whatever the model claims.

Participants are people the connector authenticated: the conversation's readers (a members or
external audience names them) and the authors of its recent inbound messages that carry source
evidence, never the agent's own identity. Display names reach the model only through
:func:`memory.retrieval.safety.model_name`, like every other outside text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accounts.models import Actor
from config.database.base import prepared_cursor
from config.errors import Unprocessable
from history.models import Conversation, Turn

#: At most this many participants are listed (the speaker and readers first): a large channel's
#: hundreds of past speakers are not all worth the prompt's room, and the model may still name the
#: author of any message in front of it.
MAX_PARTICIPANTS = 50
#: How far back the conversation's authors are read, newest first: bounded, so a channel of a
#: million messages costs what one of five hundred does.
RECENT_MESSAGES = 500

#: The subject reference for the person who wrote the message being answered.
SPEAKER = "speaker"

RECENT_AUTHORS_SQL = f"""
SELECT m.actor_id
FROM (
    SELECT id, actor_id FROM history_message
    WHERE conversation_id = %(conversation_id)s AND direction = 'inbound' AND actor_id IS NOT NULL
    ORDER BY created_at DESC, id DESC
    LIMIT {RECENT_MESSAGES}
) m
WHERE EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = m.id)
GROUP BY m.actor_id
ORDER BY max(m.id) DESC
LIMIT {MAX_PARTICIPANTS}
"""

AUTHORS_OF_SQL = """
SELECT DISTINCT m.actor_id FROM history_message m
WHERE m.agent_id = %(agent_id)s AND m.id = ANY(%(message_ids)s::bigint[]) AND m.direction = 'inbound'
  AND m.actor_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = m.id)
"""


@dataclass(frozen=True)
class Participant:
    actor_id: int
    external_id: str
    display_name: str
    connector: str
    speaking: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "actor_id": self.actor_id,
            "external_id": self.external_id,
            "display_name": self.display_name,
            "connector": self.connector,
            "speaking": self.speaking,
        }


def conversation_participants(conversation: Conversation, *, speaker_id: int | None) -> list[Participant]:
    """The speaker first, then the conversation's readers, then its recent authenticated authors."""
    with prepared_cursor() as cursor:
        cursor.execute(RECENT_AUTHORS_SQL, {"conversation_id": conversation.pk})
        authors = [actor_id for (actor_id,) in cursor.fetchall()]
    ordered = [*([speaker_id] if speaker_id is not None else []), *conversation.audience_readers, *authors]
    return _participants(conversation.agent_id, ordered, speaker_id=speaker_id)[:MAX_PARTICIPANTS]


def turn_participants(turn: Turn) -> list[Participant]:
    return conversation_participants(turn.session.conversation, speaker_id=turn.requester_id)


def _participants(agent_id: int, actor_ids: Sequence[int], *, speaker_id: int | None) -> list[Participant]:
    ordered = list(dict.fromkeys(actor_ids))
    actors = {
        actor.pk: actor
        for actor in Actor.objects.filter(pk__in=ordered, connector__agent_id=agent_id, is_agent=False).select_related(
            "connector"
        )
    }
    return [
        Participant(
            actor_id=actor.pk,
            external_id=actor.external_id,
            display_name=_screened_name(actor.display_name, actor.external_id),
            connector=actor.connector.namespace,
            speaking=actor.pk == speaker_id,
        )
        for actor in (actors[a] for a in ordered if a in actors)
    ]


def _screened_name(display_name: str, external_id: str) -> str:
    return display_name


def _authors_of(agent_id: int, message_ids: Iterable[int]) -> list[int]:
    with prepared_cursor() as cursor:
        cursor.execute(AUTHORS_OF_SQL, {"agent_id": agent_id, "message_ids": list(message_ids)})
        return [actor_id for (actor_id,) in cursor.fetchall()]


def nameable_subjects(turn: Turn) -> list[Participant]:
    """Everyone a belief in this turn may be about: the participants, and the authenticated authors
    of the messages in front of the turn (its loaded history and this turn's search results)."""
    participants = turn_participants(turn)
    listed = {p.actor_id for p in participants}
    in_front = [*turn.loaded_message_ids, *turn.evidence_message_ids]
    others = [a for a in _authors_of(turn.agent_id, in_front) if a not in listed] if in_front else []
    return participants + _participants(turn.agent_id, others, speaker_id=turn.requester_id)


def resolve_subject(turn: Turn, *, reference: str | None, actor_id: int | None) -> int | None:
    """The actor a ``remember``/``amend`` call names as its subject, or None when it names none.

    ``reference`` is ``"speaker"`` (the inbound message's author) or a participant's external id;
    ``actor_id`` must be a participant's actor id. Anything else is refused with
    ``subject_not_participant``, naming who may be named.
    """
    if reference is None and actor_id is None:
        return None
    if reference == SPEAKER:
        return turn.requester_id
    people = nameable_subjects(turn)
    if actor_id is not None:
        match = [p for p in people if p.actor_id == actor_id]
    else:
        match = [p for p in people if p.external_id == reference]
    if len(match) != 1:
        # Two connectors may share an external id: then only the actor id says which person.
        raise Unprocessable(
            "the subject must be one of this turn's participants: "
            + ", ".join(f"{p.display_name} (actor {p.actor_id})" for p in people[:20]),
            code="subject_not_participant",
            detail={"participants": [p.as_dict() for p in people]},
        )
    return match[0].actor_id


__all__ = [
    "MAX_PARTICIPANTS",
    "SPEAKER",
    "Participant",
    "conversation_participants",
    "nameable_subjects",
    "resolve_subject",
    "turn_participants",
]
