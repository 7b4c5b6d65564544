"""The people a turn's model may name as a memory's subject, and how a subject it names is resolved.

A turn starts by listing the conversation's participants (actor id, external id, display name,
connector, and which one is speaking), so that the model can say whom a belief is about. A subject
the model names in ``remember`` or ``amend`` (or among ``recall``'s ``subjects``) is resolved here,
among those participants and the authors of the messages in front of the turn (its loaded history
and search results), and nowhere else: an actor id outside them is refused
(``subject_not_participant``), whatever the model claims.

Participants are the conversation's people: its readers (a members or external audience names
them), the people the message being answered names (an agent's actor whose display name or external
id it contains as a word: Bob telling the agent about Alice may make a memory about Alice), and the
authors of its recent inbound messages that carry source evidence; never the agent's own identity.
Display names reach the model only through
:func:`memory.retrieval.safety.model_name`, like every other outside text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accounts.models import Actor
from config.database.base import prepared_cursor
from config.errors import Unprocessable
from history.models import Conversation, Turn
from memory.retrieval.query import named_actor_ids
from memory.retrieval.safety import WITHHELD_NAME, model_name

#: At most this many participants are listed (the speaker and readers first): a large channel's
#: hundreds of past speakers are not all worth the prompt's room, and the model may still name the
#: author of any message in front of it.
MAX_PARTICIPANTS = 50
#: How far back the conversation's authors are read, newest first: bounded, so a channel of a
#: million messages costs what one of five hundred does.
RECENT_MESSAGES = 500

#: The subject reference for the person who wrote the message being answered.
SPEAKER = "speaker"

#: Where the people the message names, and then the recent authors, start in the participants' order
#: (the speaker and readers come first, at their own positions).
MENTIONED_FROM, RECENT_FROM = 1_000_000, 2_000_000

#: The participants in one statement, in order: the actors named first (the speaker, then the
#: conversation's readers), then those whose display name or external id the answered message
#: contains (a substring test, confirmed as a whole word in Python), then the authenticated authors of
#: its recent inbound messages, newest first; each once, only the agent's own people, never its own
#: identity. Each row says whether the message's naming it is its only reason to be there.
PARTICIPANTS_SQL = f"""
WITH recent AS (
    SELECT m.actor_id, max(m.id) AS latest
    FROM (
        SELECT id, actor_id FROM history_message
        WHERE conversation_id = %(conversation_id)s AND direction = 'inbound' AND actor_id IS NOT NULL
        ORDER BY created_at DESC, id DESC
        LIMIT {RECENT_MESSAGES}
    ) m
    WHERE EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = m.id)
    GROUP BY m.actor_id
    ORDER BY latest DESC
    LIMIT {MAX_PARTICIPANTS}
), mentioned AS (
    SELECT a.id AS actor_id FROM accounts_actor a JOIN accounts_connector c ON c.id = a.connector_id
    WHERE %(said)s <> '' AND c.agent_id = %(agent_id)s
      AND (a.display_name <> '' AND strpos(%(said)s, lower(a.display_name)) > 0
           OR a.external_id <> '' AND strpos(%(said)s, lower(a.external_id)) > 0)
), wanted AS MATERIALIZED (
    SELECT actor_id, position FROM unnest(%(named)s::bigint[]) WITH ORDINALITY AS n(actor_id, position)
    UNION ALL
    SELECT actor_id, {MENTIONED_FROM} FROM mentioned
    UNION ALL
    SELECT actor_id, {RECENT_FROM} + row_number() OVER (ORDER BY latest DESC) FROM recent
)
SELECT a.id, a.external_id, a.display_name, c.type, c.name,
       bool_and(w.position >= {MENTIONED_FROM} AND w.position < {RECENT_FROM}) AS only_mentioned
FROM wanted w
JOIN accounts_actor a ON a.id = w.actor_id
JOIN accounts_connector c ON c.id = a.connector_id
WHERE c.agent_id = %(agent_id)s AND NOT a.is_agent
GROUP BY a.id, a.external_id, a.display_name, c.type, c.name
ORDER BY min(w.position), a.id
LIMIT {2 * MAX_PARTICIPANTS}
"""

#: The authenticated authors of some of the agent's messages, with their connectors.
AUTHORS_OF_SQL = """
SELECT DISTINCT a.id, a.external_id, a.display_name, c.type, c.name, false
FROM history_message m
JOIN accounts_actor a ON a.id = m.actor_id
JOIN accounts_connector c ON c.id = a.connector_id
WHERE m.agent_id = %(agent_id)s AND m.id = ANY(%(message_ids)s::bigint[]) AND m.direction = 'inbound'
  AND c.agent_id = %(agent_id)s AND NOT a.is_agent
  AND EXISTS (SELECT 1 FROM history_messagesourceevidence e WHERE e.message_id = m.id)
ORDER BY a.id
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


def conversation_participants(
    conversation: Conversation, *, speaker_id: int | None, said: str = ""
) -> list[Participant]:
    """The speaker first, then the conversation's readers, then the people ``said`` (the message being
    answered) names, then the conversation's recent authenticated authors."""
    named = [*([speaker_id] if speaker_id is not None else []), *conversation.audience_readers]
    params = {
        "conversation_id": conversation.pk,
        "named": list(dict.fromkeys(named)),
        "agent_id": conversation.agent_id,
        "said": said.lower() if said.strip() else "",
    }
    return _participants(PARTICIPANTS_SQL, params, speaker_id=speaker_id, said=said)[:MAX_PARTICIPANTS]


def turn_participants(turn: Turn) -> list[Participant]:
    # The inbound message is already loaded when the turn has just started (turn_start sets it).
    said = turn.inbound_message.body
    return conversation_participants(turn.session.conversation, speaker_id=turn.requester_id, said=said)


def _participants(sql: str, params: Mapping[str, Any], *, speaker_id: int | None, said: str = "") -> list[Participant]:
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # A name found only as a substring of the message (Al in "Alice") is no mention: keep the whole words.
    only_mentioned = [Actor(pk=row[0], external_id=row[1], display_name=row[2]) for row in rows if row[5]]
    mentioned = set(named_actor_ids(said, only_mentioned)) if only_mentioned else set()
    return [
        Participant(
            actor_id=actor_id,
            external_id=model_name(external_id) or WITHHELD_NAME,
            display_name=_screened_name(display_name, external_id),
            connector=f"{connector_type}:{connector_name}",
            speaking=actor_id == speaker_id,
        )
        for actor_id, external_id, display_name, connector_type, connector_name, mention_only in rows
        if not mention_only or actor_id in mentioned
    ]


def _screened_name(display_name: str, external_id: str) -> str:
    """A participant's name as the model reads it: screened like every other name, and the external
    id when it fails (the participant is still nameable, by that id)."""
    return model_name(display_name) or model_name(external_id) or WITHHELD_NAME


def nameable_subjects(turn: Turn) -> list[Participant]:
    """Everyone a belief in this turn may be about: the participants, and the authenticated authors
    of the messages in front of the turn (its loaded history and this turn's search results)."""
    participants = turn_participants(turn)
    in_front = [*turn.loaded_message_ids, *turn.evidence_message_ids]
    if not in_front:
        return participants
    listed = {p.actor_id for p in participants}
    params = {"agent_id": turn.agent_id, "message_ids": in_front}
    authors = _participants(AUTHORS_OF_SQL, params, speaker_id=turn.requester_id)
    return participants + [p for p in authors if p.actor_id not in listed]


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
    return _resolve(actor_id if actor_id is not None else reference or "", nameable_subjects(turn))


def resolve_subjects(turn: Turn, references: Sequence[str | int]) -> tuple[int, ...]:
    """The actors a ``recall`` call names as its ``subjects``, each resolved as :func:`resolve_subject`
    resolves one (text: ``"speaker"`` or an external id; an integer: an actor id), in order, once each.
    One reference that names nobody in the turn refuses them all (``subject_not_participant``)."""
    people: list[Participant] | None = None
    resolved: list[int] = []
    for reference in references:
        if reference == SPEAKER:
            if turn.requester_id is not None:
                resolved.append(turn.requester_id)
            continue
        if people is None:
            people = nameable_subjects(turn)
        resolved.append(_resolve(reference, people))
    return tuple(dict.fromkeys(resolved))


def _resolve(reference: str | int, people: Sequence[Participant]) -> int:
    """The one participant ``reference`` names: an actor id (an integer) or an external id (text)."""
    if isinstance(reference, int):
        match = [p for p in people if p.actor_id == reference]
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
    "resolve_subjects",
    "turn_participants",
]
