"""Which of the pool's own lines tell a time, for the ranking's ``tells_time`` feature.

Read only when the query asks when (or how long), and only for the pool's own members: ids the eligible
set has just admitted (the scan, the re-validation of the arms' proposals, the exchange neighbours).
Nothing here adds to the pool or reads a message it does not hold.
"""

from __future__ import annotations

from collections.abc import Collection

from config.database.base import prepared_cursor
from memory.retrieval.dates import tells_time


def timed_lines(*, agent_id: int, message_ids: Collection[int], asks_when: bool) -> frozenset[int]:
    """The pool members whose text tells a time, each read against when its line was written. One
    statement, and none when the query does not ask when (the feature then reads nothing)."""
    if not message_ids or not asks_when:
        return frozenset()
    with prepared_cursor() as cursor:
        cursor.execute(
            "SELECT m.id, m.body, m.created_at FROM history_message m"
            " WHERE m.id = ANY(%s::bigint[]) AND m.agent_id = %s",
            [sorted(message_ids), agent_id],
        )
        return frozenset(message_id for message_id, body, written in cursor.fetchall() if tells_time(body, written))
