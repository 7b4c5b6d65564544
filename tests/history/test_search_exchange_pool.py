"""History search (history@5): the eligible neighbours of the strongest matches join the pool, and a
line shorter than the pool's average counts for a little less. A neighbour is judged by the same
eligibility, filters and exclusions as every candidate; nothing the eligible set did not admit is
ever found."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Actor, Connector
from history.models import Conversation, Message
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import WEIGHTS, HistoryQuery, HistoryResult, search_history
from memory.retrieval.history_search.ranking import Candidate, content_share, score_candidates
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, make_message, public_channel, ranking_signals

pytestmark = pytest.mark.django_db


class Room:
    def __init__(self) -> None:
        agent = AgentFactory.create()
        self.connector: Connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
        self.alice, self.bob, self.carol = (
            ActorFactory.create(connector=self.connector, display_name=name) for name in ("Alice", "Bob", "Carol")
        )
        self.general: Conversation = public_channel(self.connector, title="#general")
        self.start = timezone.now() - timedelta(days=3)

    def say(self, actor: Actor, body: str, minute: int, **options: Any) -> Message:
        return make_message(self.general, actor=actor, body=body, created_at=self.at(minute), **options)

    def at(self, minute: int) -> datetime:
        return self.start + timedelta(minutes=minute)

    def search(self, text: str, **options: Any) -> HistoryResult:
        query = HistoryQuery(text=text, limit=10, actor=options.pop("actor", None))
        return search_history(
            perspective=perspective_for_conversation(self.general, requester_id=self.carol.pk),
            query=query,
            providers=(),
            **options,
        )


def hits(result: HistoryResult) -> list[int]:
    return [hit.message.message_id for hit in result.hits]


@pytest.fixture
def room() -> Room:
    return Room()


def test_the_answer_to_a_matching_question_is_found_though_it_shares_no_word_with_the_query(room: Room) -> None:
    """Bob's reply names the venue but none of the query's words: no arm proposes it. It is the
    question's neighbour in the eligible transcript, so it joins the pool on its context alone, and is
    a hit of its own, ranked after the question that matched."""
    question = room.say(room.alice, "Which venue did you book for the offsite?", 0)
    answer = room.say(room.bob, "The old lighthouse in Portland.", 1)
    result = room.search("offsite venue")
    assert hits(result)[:2] == [question.pk, answer.pk]
    parts = next(hit.components for hit in result.hits if hit.message.message_id == answer.pk)
    assert parts["match"] == 0.0 and parts["context"] > 0.0


def test_a_neighbour_the_eligible_set_does_not_admit_never_joins_the_pool(room: Room) -> None:
    """A reply of unknown provenance is not eligible: it is neither a hit nor anyone's neighbour, and
    the next eligible line takes its place."""
    question = room.say(room.alice, "Which venue did you book for the offsite?", 0)
    unverified = room.say(room.bob, "The old lighthouse in Portland.", 1, evidence=None)
    following = room.say(room.bob, "Parking is behind it.", 2)
    result = room.search("offsite venue")
    assert unverified.pk not in result.message_ids
    assert hits(result)[:2] == [question.pk, following.pk]


def test_a_neighbour_outside_the_filters_or_already_in_context_never_joins_the_pool(room: Room) -> None:
    """Filters only narrow, and a message the caller already holds is excluded: a neighbour is judged by
    both, like every candidate."""
    question = room.say(room.alice, "Which venue did you book for the offsite?", 0)
    answer = room.say(room.bob, "The old lighthouse in Portland.", 1)
    assert hits(room.search("offsite venue", actor=str(room.alice.pk))) == [question.pk]
    assert answer.pk not in hits(room.search("offsite venue", exclude_message_ids=[answer.pk]))


def test_a_neighbour_in_another_agents_transcript_is_never_read(room: Room) -> None:
    """Another agent's lines, written at the same moments, are not this agent's transcript: they are no
    one's neighbour here."""
    question = room.say(room.alice, "Which venue did you book for the offsite?", 0)
    other = Room()
    other.start = room.start
    foreign = other.say(other.bob, "The old lighthouse in Portland.", 1)
    result = room.search("offsite venue")
    assert hits(result) == [question.pk]
    assert foreign.pk not in result.message_ids


def test_a_line_shorter_than_the_pools_average_counts_for_a_little_less() -> None:
    """Two lines as closely matched: the one as long as the pool's average outranks the one-line
    reaction, by ``content`` times the difference in their share of the average."""
    now = timezone.now()
    pool = [Candidate(message_id=i, conversation_id=1, actor_id=None, created_at=now, match=0.5) for i in (1, 2)]
    lengths = {1: 2, 2: 14, 3: 8}  # a pool member that is not a candidate here still counts in the average
    shares = content_share(lengths)
    assert shares == {1: pytest.approx(2 / 8), 2: 1.0, 3: 1.0}  # capped: a long line is no better than an average one
    scored = score_candidates(pool, ranking_signals(now, lengths=lengths))
    assert [message_id for _, message_id, _ in scored] == [2, 1]
    assert scored[0][0] - scored[1][0] == pytest.approx(WEIGHTS["content"] * (1 - 2 / 8), abs=1e-5)


def test_a_message_whose_document_was_not_read_gets_no_content_credit() -> None:
    """A neighbour taken in for its context alone has no document, so no length: its content is 0, and
    without lengths the feature changes no order."""
    now = timezone.now()
    pool = [Candidate(message_id=i, conversation_id=1, actor_id=None, created_at=now, match=0.0) for i in (1, 2)]
    scored = score_candidates(pool, ranking_signals(now, lengths={1: 10}))
    assert {message_id: parts["content"] for _, message_id, parts in scored} == {1: 1.0, 2: 0.0}
    assert content_share({}) == {}
