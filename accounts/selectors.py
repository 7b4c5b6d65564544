"""Reads of an agent's people."""

from __future__ import annotations

from accounts.models import Actor, Connector
from config.rows import fetch_all, select_list

#: One statement of fixed text: memory recall and history search run it for every call, and the ORM
#: would spend more than its round trip compiling the equivalent query each time.
ACTORS_NAMED_IN_SQL = (
    f"SELECT {select_list(Actor, 'a')} FROM {Actor._meta.db_table} a"
    f" JOIN {Connector._meta.db_table} c ON c.id = a.connector_id"
    " WHERE c.agent_id = %(agent_id)s"
    " AND (a.display_name <> '' AND strpos(%(text)s, lower(a.display_name)) > 0"
    " OR a.external_id <> '' AND strpos(%(text)s, lower(a.external_id)) > 0)"
    " ORDER BY a.id"
)


def actors_named_in(agent_id: int, text: str) -> list[Actor]:
    """The agent's actors whose display name or external id occurs in ``text``, ignoring case.

    These are the only candidates :func:`memory.retrieval.query.named_actor_ids` can find (it keeps
    those named as whole words), so memory recall and history search load them rather than every
    person the agent knows: one substring test per actor in the database instead of one loaded row
    per actor per call.
    """
    return fetch_all(Actor, ACTORS_NAMED_IN_SQL, {"agent_id": agent_id, "text": text.lower()})
