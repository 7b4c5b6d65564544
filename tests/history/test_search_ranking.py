"""History search ranking (history@5): who the query names, exchange context, and the semantic-only
switch. Every feature only reorders what eligibility admitted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Actor, Connector, RuntimeAgent
from history.models import Conversation, EvidenceMethod, Message, Session, Turn
from history.services import message_ingest
from memory.retrieval.eligibility import EligibleMessages, perspective_for_conversation, perspective_for_turn
from memory.retrieval.history_search import (
    CONTEXT_DECAY,
    CONTEXT_REACH,
    CURRENT_WINDOW,
    EXCHANGE_GAP,
    POLICY_VERSION,
    WEIGHTS,
    HistoryQuery,
    HistoryResult,
    search_history,
)
from memory.retrieval.history_search.candidates import neighbour_pairs
from memory.retrieval.history_search.ranking import FEATURES, Candidate, score_candidates, sitting_strength
from memory.retrieval.providers import ArmHit
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, public_channel, ranking_signals

pytestmark = pytest.mark.django_db


@dataclass
class Room:
    agent: RuntimeAgent
    connector: Connector
    alice: Actor
    bob: Actor
    carol: Actor
    general: Conversation
    random: Conversation

    def say(
        self,
        actor: Actor,
        body: str,
        *,
        at: datetime,
        conversation: Conversation | None = None,
        authenticated: bool = True,
    ) -> Message:
        return message_ingest(
            conversation=conversation or self.general,
            actor=actor,
            body=body,
            created_at=at,
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED if authenticated else None,
        ).message

    def search(self, text: str, *, requester: Actor | None = None, **options: Any) -> HistoryResult:
        options.setdefault("providers", ())
        return search_history(
            perspective=perspective_for_conversation(self.random, requester_id=(requester or self.carol).pk),
            query=HistoryQuery(text=text, limit=10),
            **options,
        )


def found(result: HistoryResult) -> list[int]:
    return [hit.message.message_id for hit in result.hits]


def components(result: HistoryResult, message: Message) -> dict[str, float]:
    return next(hit.components for hit in result.hits if hit.message.message_id == message.pk)


@pytest.fixture
def room() -> Room:
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice, bob, carol = (ActorFactory.create(connector=connector, display_name=n) for n in ("Alice", "Bob", "Carol"))
    return Room(
        agent=agent,
        connector=connector,
        alice=alice,
        bob=bob,
        carol=carol,
        general=public_channel(connector, title="#general"),
        random=public_channel(connector, title="#random"),
    )


def test_the_policy_is_versioned_and_every_feature_is_weighted() -> None:
    assert POLICY_VERSION == "history@6"
    assert set(FEATURES) == set(WEIGHTS)


def test_a_score_is_the_weighted_sum_of_the_components_it_reports() -> None:
    """What a hit reports as its components is what it was ranked on, named as the weights name them;
    a limit keeps the best of the full order and lays out only their components."""
    now = timezone.now()
    pool = [
        Candidate(message_id=1, conversation_id=1, actor_id=7, created_at=now - timedelta(days=3), match=0.9),
        Candidate(message_id=2, conversation_id=2, actor_id=8, created_at=now - timedelta(hours=1), match=0.4),
        Candidate(message_id=3, conversation_id=1, actor_id=9, created_at=now - timedelta(days=40), match=0.6),
    ]
    signals = ranking_signals(
        now,
        named_ids=frozenset({8}),
        requester_ids=frozenset({9}),
        conversation_id=1,
        window=frozenset({3}),
        neighbours={1: ((2, 1),)},
    )
    scored = score_candidates(pool, signals)
    by_id = {message_id: parts for _, message_id, parts in scored}
    assert by_id[2]["named"] == 1.0 and by_id[2]["context"] == 0.9
    assert by_id[3]["same_actor"] == by_id[3]["same_conversation"] == by_id[3]["current_window"] == 1.0
    for score, _, parts in scored:
        assert set(parts) == set(WEIGHTS)
        assert score == pytest.approx(sum(WEIGHTS[name] * value for name, value in parts.items()), abs=1e-3)
    assert score_candidates(pool, signals, limit=2) == scored[:2]


def test_a_named_persons_message_outranks_an_equal_match_by_someone_else(room: Room) -> None:
    """Same words, but the query names Bob: Bob's message comes first, even though it is older."""
    now = timezone.now()
    bobs = room.say(room.bob, "I love hiking in the Alps every summer.", at=now - timedelta(days=3))
    alices = room.say(room.alice, "I love hiking in the Alps every summer.", at=now - timedelta(days=2))
    result = room.search("Where does Bob love hiking?")
    assert found(result)[:2] == [bobs.pk, alices.pk]
    assert components(result, bobs)["named"] == 1.0
    assert components(result, alices)["named"] == 0.0
    assert found(room.search("Bob's favourite hiking"))[:2] == [bobs.pk, alices.pk]  # a possessive names him too
    # The name is matched as the author, not as a word: a greeting to Bob is no better a match.
    greeting = room.say(room.alice, "Morning Bob!", at=now - timedelta(days=1))
    assert greeting.pk not in found(room.search("Where does Bob love hiking?"))


def test_a_name_that_resolves_to_no_actor_stays_a_search_word(room: Room) -> None:
    now = timezone.now()
    said = room.say(room.alice, "Dave from finance approved the budget.", at=now - timedelta(hours=1))
    result = room.search("What did Dave approve?")
    assert found(result) == [said.pk]
    assert components(result, said)["named"] == 0.0


def test_neighbour_context_lifts_the_answer_of_a_question_and_answer_pair(room: Room) -> None:
    """The question shares most of the query's words; the reply right after it carries the answer but
    matches only as weakly as an unrelated message does. Context puts the answer first of the two,
    though the unrelated message is more recent and was written first."""
    now = timezone.now()
    unrelated = room.say(room.carol, "I still have to book a dentist appointment.", at=now - timedelta(hours=1))
    question = room.say(room.alice, "Which venue did you book for the offsite?", at=now - timedelta(days=2))
    answer = room.say(room.bob, "We booked the old lighthouse in Portland.", at=now - timedelta(days=2, minutes=-1))
    result = room.search("offsite venue booking")
    ranked = found(result)
    assert ranked[0] == question.pk
    assert ranked.index(answer.pk) < ranked.index(unrelated.pk)
    assert components(result, answer)["context"] == components(result, question)["match"]
    assert components(result, unrelated)["context"] == 0.0


def test_the_exchange_reaches_two_eligible_messages_each_side_within_the_gap(room: Room) -> None:
    """A reply often answers the line before the one that matched: each strong match's neighbours are
    the two nearest eligible messages on each side (an ineligible one takes no place), within the gap."""
    now = timezone.now()
    room.say(room.carol, "Too early to count.", at=now - timedelta(hours=8))
    before = room.say(room.carol, "Good morning all.", at=now - timedelta(minutes=11))
    question = room.say(room.alice, "Which venue did you book for the offsite?", at=now - timedelta(minutes=10))
    adjacent = room.say(room.bob, "Let me check my notes.", at=now - timedelta(minutes=9))
    room.say(room.bob, "Unverified aside.", at=now - timedelta(minutes=9), authenticated=False)
    answer = room.say(room.bob, "The old lighthouse in Portland.", at=now - timedelta(minutes=8))
    room.say(room.carol, "Lunch anyone?", at=now - timedelta(minutes=7))
    perspective = perspective_for_conversation(room.random, requester_id=room.carol.pk)
    eligible = EligibleMessages(perspective)
    pairs = neighbour_pairs(eligible, "", {**eligible.params(), "q_excluded": []}, [question.pk])
    assert CONTEXT_REACH == 2
    assert sorted((p.source_id, p.message_id, p.distance) for p in pairs) == sorted(
        [(question.pk, before.pk, 1), (question.pk, adjacent.pk, 1), (question.pk, answer.pk, 2)]
    )
    # Each neighbour carries what ranking reads of a candidate, so it can join the pool.
    by_id = {p.message_id: p for p in pairs}
    assert (by_id[answer.pk].conversation_id, by_id[answer.pk].actor_id) == (room.general.pk, room.bob.pk)
    assert by_id[answer.pk].created_at == answer.created_at


def test_context_halves_with_each_step_beyond_the_adjacent_message() -> None:
    now = timezone.now()
    pool = [
        Candidate(message_id=i, conversation_id=1, actor_id=None, created_at=now, match=m)
        for i, m in ((1, 0.8), (2, 0.0), (3, 0.0))
    ]
    signals = ranking_signals(now, neighbours={1: ((2, 1), (3, 2))})
    context = {message_id: parts["context"] for _, message_id, parts in score_candidates(pool, signals)}
    assert context == {1: 0.0, 2: 0.8, 3: pytest.approx(0.8 * CONTEXT_DECAY)}


def test_a_sitting_holding_the_strongest_matches_lifts_its_other_lines() -> None:
    """A sitting is a run of one conversation's pool members without a gap over ``EXCHANGE_GAP``: its
    share of the strongest matches lifts a weak line of it past an equal line of another sitting, or of
    another conversation at the same moment."""
    start = timezone.now() - timedelta(days=10)

    def candidate(message_id: int, conversation_id: int, at: timedelta, match: float) -> Candidate:
        return Candidate(
            message_id=message_id, conversation_id=conversation_id, actor_id=None, created_at=start + at, match=match
        )

    pool = [
        candidate(1, 1, timedelta(minutes=0), 0.9),
        candidate(2, 1, timedelta(minutes=1), 0.1),
        candidate(3, 1, EXCHANGE_GAP, 0.8),  # still the first sitting: no gap *longer* than EXCHANGE_GAP
        candidate(4, 1, timedelta(days=2), 0.5),
        candidate(5, 1, timedelta(days=2, minutes=1), 0.1),
        candidate(6, 2, timedelta(minutes=1), 0.1),
    ]
    strength = sitting_strength(pool)
    assert strength[1] == strength[2] == strength[3] == 1.0
    # Every member here is among the strongest ten: the first sitting sums 1.8, the second 0.6.
    assert strength[4] == strength[5] == pytest.approx(0.6 / 1.8)
    assert strength[6] == pytest.approx(0.1 / 1.8)
    signals = ranking_signals(timezone.now())
    order = [message_id for _, message_id, _ in score_candidates(pool, signals)]
    assert order.index(2) < order.index(5) < order.index(6)


def test_an_ineligible_neighbour_never_contributes(room: Room) -> None:
    """A reply without source evidence is neither a hit nor a neighbour: the next eligible message of
    the exchange is the question's neighbour instead."""
    now = timezone.now()
    question = room.say(room.alice, "Which venue did you book for the offsite?", at=now - timedelta(minutes=10))
    unverified = room.say(
        room.bob, "We booked the old lighthouse in Portland.", at=now - timedelta(minutes=9), authenticated=False
    )
    following = room.say(room.bob, "Booked parking there too.", at=now - timedelta(minutes=8))
    result = room.search("offsite venue booking")
    assert unverified.pk not in result.message_ids
    assert found(result)[0] == question.pk
    assert components(result, following)["context"] == components(result, question)["match"]


def test_messages_far_apart_in_time_are_not_one_exchange(room: Room) -> None:
    now = timezone.now()
    room.say(room.alice, "Which venue did you book for the offsite?", at=now - timedelta(days=20))
    later = room.say(room.bob, "I booked a table for Friday.", at=now - timedelta(days=10))
    result = room.search("offsite venue booking")
    assert components(result, later)["context"] == 0.0


def test_semantic_only_search_returns_provider_candidates_that_eligibility_admits(room: Room) -> None:
    """``lexical=False``: candidates come from the providers alone, still through eligibility."""
    now = timezone.now()
    said = room.say(room.alice, "The deploy freeze starts on Friday.", at=now - timedelta(hours=2))
    hidden = room.say(room.bob, "The deploy freeze starts on Friday.", at=now - timedelta(hours=1), authenticated=False)

    class Everything:
        name = "semantic"
        in_database = True

        def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
            return [ArmHit("semantic", hidden.pk, 1, 0.9), ArmHit("semantic", said.pk, 2, 0.8)]

    result = room.search("deploy freeze", providers=[Everything()], lexical=False)
    assert found(result) == [said.pk]
    assert hidden.pk not in result.message_ids
    assert found(room.search("deploy freeze", lexical=False)) == []


def test_only_the_latest_messages_before_the_one_answered_count_as_the_loaded_window(room: Room) -> None:
    """In a turn, a match among the conversation's latest ``CURRENT_WINDOW`` messages up to the inbound
    one is demoted as already in the prompt; one message further back, or in another conversation, is not."""
    start = timezone.now() - timedelta(days=1)
    oldest = room.say(room.alice, "The harbour ferry leaves at nine.", at=start)
    edge = room.say(room.bob, "The harbour ferry leaves at ten now.", at=start + timedelta(minutes=1))
    for minute in range(2, CURRENT_WINDOW - 1):
        room.say(room.carol, f"Filler line {minute}.", at=start + timedelta(minutes=minute))
    recent = room.say(room.alice, "Harbour ferry tickets are sold out.", at=start + timedelta(minutes=CURRENT_WINDOW))
    elsewhere = room.say(
        room.bob, "The harbour ferry was late.", at=start + timedelta(minutes=5), conversation=room.random
    )
    inbound = room.say(room.carol, "When does the ferry leave?", at=start + timedelta(minutes=CURRENT_WINDOW + 1))
    turn = Turn(
        agent=room.agent,
        session=Session.objects.create(agent=room.agent, conversation=room.general),
        inbound_message=inbound,
        requester=room.carol,
    )
    turn.set_audience(room.general.audience)
    turn.save()

    result = search_history(
        perspective=perspective_for_turn(turn),
        query=HistoryQuery(text="harbour ferry", limit=10),
        turn=turn,
        providers=(),
    )
    # The window is the inbound message and the 29 before it: ``edge`` is the last of them, ``oldest`` is not.
    windowed = {m.pk: components(result, m)["current_window"] for m in (oldest, edge, recent, elsewhere)}
    assert windowed == {oldest.pk: 0.0, edge.pk: 1.0, recent.pk: 1.0, elsewhere.pk: 0.0}
