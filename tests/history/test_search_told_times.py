"""History search (history@6): a question asking when finds the line that tells a time. Only the pool's
eligible members are read for it, in one statement, and only for a question asking when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Actor, Connector
from history.models import Conversation, Message
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, HistoryResult, search_history
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, make_message, public_channel

pytestmark = pytest.mark.django_db

#: The start of the statement that reads the pool's lines for their times.
TIMES_SQL = "SELECT m.id, m.body, m.created_at FROM history_message m WHERE m.id = ANY("
#: A Monday.
MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


class Room:
    def __init__(self) -> None:
        agent = AgentFactory.create()
        self.connector: Connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
        self.caroline, self.melanie = (
            ActorFactory.create(connector=self.connector, display_name=name) for name in ("Caroline", "Melanie")
        )
        self.general: Conversation = public_channel(self.connector, title="#general")

    def say(self, actor: Actor, body: str, written: datetime, **options: Any) -> Message:
        return make_message(self.general, actor=actor, body=body, created_at=written, **options)

    def search(self, text: str) -> HistoryResult:
        return search_history(
            perspective=perspective_for_conversation(self.general, requester_id=self.melanie.pk),
            query=HistoryQuery(text=text, limit=10),
            providers=(),
        )


def hits(result: HistoryResult) -> list[int]:
    return [hit.message.message_id for hit in result.hits]


@pytest.fixture
def room() -> Room:
    return Room()


def test_a_question_asking_when_finds_the_line_that_tells_a_time(room: Room) -> None:
    """Both lines speak of the support group; the one that says when comes first for "When did ...?"."""
    plans = room.say(room.caroline, "The support group is great, the support group really helps me.", MAY_8)
    went = room.say(room.caroline, "I went to a support group yesterday.", MAY_8 + timedelta(days=30))
    result = room.search("When did Caroline go to the support group?")
    assert hits(result)[:2] == [went.pk, plans.pk]
    parts = next(hit.components for hit in result.hits if hit.message.message_id == went.pk)
    assert parts["tells_time"] == 1.0


def test_a_line_the_eligible_set_does_not_admit_is_not_read_for_its_times(room: Room) -> None:
    """A line of unknown provenance is not eligible: whatever it tells, it is not found, and the times
    of the pool's own lines are read in one statement."""
    hidden = room.say(room.caroline, "I went to a support group yesterday.", MAY_8, evidence=None)
    shown = room.say(room.caroline, "The support group meets on Mondays.", MAY_8)
    with CaptureQueriesContext(connection) as queries:
        result = room.search("When did Caroline go to the support group?")
    assert hidden.pk not in result.message_ids and shown.pk in hits(result)
    assert sum(query["sql"].startswith(TIMES_SQL) for query in queries.captured_queries) == 1


def test_a_question_not_asking_when_reads_no_times(room: Room) -> None:
    """Nor does one that names a date: the lines written then are found by when they were written."""
    room.say(room.caroline, "I went to a support group yesterday.", MAY_8)
    with CaptureQueriesContext(connection) as queries:
        room.search("Where does Caroline's support group meet?")
        room.search("What did Caroline do on 7 May 2023?")
    assert not any(query["sql"].startswith(TIMES_SQL) for query in queries.captured_queries)
