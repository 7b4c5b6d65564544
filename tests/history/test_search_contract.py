"""The evaluation contract of spec/003 ("Conversation history search"), one test per case.

Eligibility is distinguished from relevance: each privacy case also shows the text IS found where
it may be, so an empty result can never pass for a correct one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Actor, Connector, IdentityLink, RuntimeAgent
from history.models import (
    Conversation,
    ConversationSearchEvent,
    EvidenceMethod,
    Message,
    MessageDirection,
    Session,
    Turn,
)
from memory.retrieval.eligibility import EligibleMessages, perspective_for_conversation
from memory.retrieval.history_search import TURN_EVIDENCE_CEILING, HistoryQuery, HistoryResult, search_history
from memory.retrieval.providers import ArmHit
from memory.services import Belief, Provenance, memory_remember
from tests.factories import (
    ActorFactory,
    AgentFactory,
    ConnectorFactory,
    Speaks,
    direct_conversation,
    make_message,
    private_channel,
    public_channel,
)

pytestmark = pytest.mark.django_db


@dataclass
class Room(Speaks):
    agent: RuntimeAgent
    connector: Connector
    alice: Actor
    bob: Actor
    carol: Actor
    alice_dm: Conversation
    bob_dm: Conversation
    general: Conversation
    random: Conversation
    leads: Conversation

    def search(self, conversation: Conversation, requester: Actor, text: str, **query: Any) -> HistoryResult:
        return search_history(
            perspective=perspective_for_conversation(conversation, requester_id=requester.pk),
            query=HistoryQuery(text=text, **query),
        )


def found(result: HistoryResult) -> list[int]:
    return [hit.message.message_id for hit in result.hits]


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
        alice_dm=direct_conversation(connector, alice),
        bob_dm=direct_conversation(connector, bob),
        general=public_channel(connector, title="#general"),
        random=public_channel(connector, title="#random"),
        leads=private_channel(connector, [alice, carol], title="#leads"),
    )


def test_an_actor_asks_about_a_decision_in_their_own_dm_history_it_is_found(room: Room) -> None:
    decision = room.say(room.alice_dm, room.alice, "We decided to move Acme to the new cluster on Friday.")
    result = room.search(room.alice_dm, room.alice, "Acme migration decision")
    assert found(result) == [decision.pk]
    assert result.message_ids[0] <= decision.pk <= result.message_ids[-1]


def test_another_actor_asking_the_same_never_gets_the_first_actors_dm_at_any_similarity(room: Room) -> None:
    """Even a provider that scores Alice's DM as a perfect match cannot put it in Bob's results."""

    class PerfectMatch:
        name = "semantic"
        in_database = True

        def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
            return [ArmHit("semantic", m.pk, 1, 1.0) for m in Message.objects.filter(agent=room.agent)]

    secret = room.say(room.alice_dm, room.alice, "We decided to move Acme to the new cluster on Friday.")
    for conversation in (room.bob_dm, room.general):
        result = search_history(
            perspective=perspective_for_conversation(conversation, requester_id=room.bob.pk),
            query=HistoryQuery(text="We decided to move Acme to the new cluster on Friday."),
            providers=[PerfectMatch()],
        )
        assert secret.pk not in result.message_ids
    event = ConversationSearchEvent.objects.latest("id")
    assert event.exclusion_counts["audience"] == 1


def test_another_agents_public_message_never_surfaces_even_when_a_provider_proposes_it(room: Room) -> None:
    """Another agent of the same workspace heard the same words in its own public channel. A provider
    proposing that message (and its whole conversation, as neighbours) cannot bring it into this agent's
    results: a message counts only when it and its conversation are the searching agent's."""
    other_agent = AgentFactory.create(tenant=room.agent.tenant)
    other_connector = ConnectorFactory.create(agent=other_agent, type="slack", name="acme")
    other_alice = ActorFactory.create(connector=other_connector, display_name="Alice")
    other_general = public_channel(other_connector, title="#general")
    theirs = room.say(other_general, other_alice, "The deploy freeze starts on Friday.")
    room.say(other_general, other_alice, "And it ends on Monday.")
    ours = room.say(room.general, room.alice, "The deploy freeze starts on Friday.")

    class ProposesEverything:
        name = "semantic"
        in_database = True

        def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
            return [ArmHit("semantic", m.pk, 1, 1.0) for m in Message.objects.filter(pk__in=[theirs.pk, ours.pk])]

    result = search_history(
        perspective=perspective_for_conversation(room.general, requester_id=room.alice.pk),
        query=HistoryQuery(text="deploy freeze"),
        providers=[ProposesEverything()],
    )
    assert found(result) == [ours.pk]
    assert set(result.message_ids) == {ours.pk}


def test_a_public_channel_exchange_both_actors_took_part_in_is_found_by_both(room: Room) -> None:
    question = room.say(room.general, room.alice, "Should the billing retry limit be five?")
    answer = room.say(room.general, room.bob, "Yes, five retries for billing, then alert.")
    for requester, where in ((room.alice, room.alice_dm), (room.bob, room.bob_dm)):
        result = room.search(where, requester, "billing retry limit")
        assert {question.pk, answer.pk} <= set(result.message_ids)


def test_a_workspace_channel_the_requester_never_joined_is_found(room: Room) -> None:
    said = room.say(room.random, room.carol, "The coffee machine on floor 3 is fixed.")
    result = room.search(room.bob_dm, room.bob, "coffee machine floor")
    assert found(result) == [said.pk]


def test_a_dms_history_never_surfaces_in_a_public_channel_even_for_its_own_participant(room: Room) -> None:
    private = room.say(room.alice_dm, room.alice, "My visa interview is on the 12th.")
    assert found(room.search(room.alice_dm, room.alice, "visa interview")) == [private.pk]
    assert private.pk not in room.search(room.general, room.alice, "visa interview").message_ids


def test_a_private_channels_history_reaches_the_private_channel_and_never_a_public_one(room: Room) -> None:
    said = room.say(room.leads, room.carol, "Headcount plan: two backend hires in Q3.")
    assert found(room.search(room.leads, room.alice, "headcount backend hires")) == [said.pk]
    assert said.pk not in room.search(room.general, room.alice, "headcount backend hires").message_ids
    assert said.pk not in room.search(room.bob_dm, room.bob, "headcount backend hires").message_ids


def test_a_message_with_no_source_evidence_is_excluded(room: Room) -> None:
    unknown = room.say(room.general, room.bob, "Backfilled: the release train leaves Tuesday.", authenticated=False)
    known = room.say(room.general, room.bob, "Confirmed: the release train leaves Tuesday.")
    result = room.search(room.general, room.alice, "release train Tuesday")
    assert found(result) == [known.pk]
    assert unknown.pk not in result.message_ids
    assert ConversationSearchEvent.objects.get(pk=result.event_id).exclusion_counts["no_evidence"] == 1


def reply(
    conversation: Conversation, body: str, *, history: Sequence[int] = (), revisions: Sequence[int] = ()
) -> Message:
    return make_message(
        conversation,
        body=body,
        direction=MessageDirection.OUTBOUND,
        evidence=EvidenceMethod.AGENT_REPLY,
        history_message_ids=list(history),
        memory_revision_ids=list(revisions),
    )


def test_an_agent_reply_built_on_a_private_memory_is_excluded_from_a_wider_audience_by_lineage(room: Room) -> None:
    """The reply's own text is innocuous and its own audience public: only the lineage walk stops it."""
    source = room.say(room.alice_dm, room.alice, "I am interviewing at Globex next week.")
    private = memory_remember(
        agent=room.agent,
        belief=Belief(body="Interviewing at Globex.", subject_id=room.alice.pk),
        provenance=Provenance(source_message_id=source.pk),
    ).revision
    laundered = reply(room.general, "Sure, the schedule works fine for next week.", revisions=[private.pk])
    via_history = reply(room.general, "Noted, next week's schedule is fine.", history=[source.pk])
    innocent = reply(room.general, "The schedule for next week is posted.")

    result = room.search(room.general, room.bob, "schedule next week")

    assert innocent.pk in found(result)
    assert laundered.pk not in result.message_ids and via_history.pk not in result.message_ids
    assert ConversationSearchEvent.objects.get(pk=result.event_id).exclusion_counts["lineage"] == 2
    # In Alice's own DM every source of those replies may be disclosed, so there they are found.
    in_alices_dm = room.search(room.alice_dm, room.alice, "schedule next week")
    assert {laundered.pk, via_history.pk} <= set(found(in_alices_dm))


def open_turn(room: Room, conversation: Conversation, requester: Actor, text: str) -> Turn:
    session = Session.objects.create(agent=room.agent, conversation=conversation)
    inbound = room.say(conversation, requester, text)
    turn = Turn(agent=room.agent, session=session, inbound_message=inbound, requester=requester)
    turn.set_audience(conversation.audience)
    turn.save()
    return turn


def test_search_results_join_the_turns_evidence_for_the_replys_history_message_ids(room: Room) -> None:
    old = room.say(room.general, room.bob, "The on-call rotation switches on Mondays.")
    turn = open_turn(room, room.general, room.alice, "When does on-call rotate?")
    result = search_history(
        perspective=perspective_for_conversation(room.general, requester_id=room.alice.pk),
        query=HistoryQuery(text="on-call rotation"),
        turn=turn,
    )
    assert old.pk in result.message_ids
    assert turn.inbound_message_id not in result.message_ids  # the message being answered is excluded
    turn.refresh_from_db()
    assert set(result.message_ids) <= set(turn.evidence_message_ids)


def test_a_limit_near_the_provenance_caps_does_not_produce_an_undeliverable_reply(room: Room) -> None:
    """The turn's evidence stops at 400 messages (under the lineage walk's 500-id cap): requests
    shrink near it, and at it the search answers search_budget_exhausted."""
    for n in range(30):
        room.say(room.general, room.bob, f"Incident {n}: the payment gateway timed out again.")
    turn = open_turn(room, room.general, room.alice, "payment gateway incidents?")
    turn.evidence_message_ids = list(range(10_000_000, 10_000_000 + TURN_EVIDENCE_CEILING - 7))
    turn.save(update_fields=["evidence_message_ids"])
    perspective = perspective_for_conversation(room.general, requester_id=room.alice.pk)

    near = search_history(perspective=perspective, query=HistoryQuery(text="payment gateway", limit=20), turn=turn)
    turn.refresh_from_db()
    assert 0 < len(near.message_ids) <= 7
    assert len(set(turn.evidence_message_ids)) <= TURN_EVIDENCE_CEILING

    turn.evidence_message_ids = list(range(10_000_000, 10_000_000 + TURN_EVIDENCE_CEILING))
    turn.save(update_fields=["evidence_message_ids"])
    exhausted = search_history(perspective=perspective, query=HistoryQuery(text="payment gateway"), turn=turn)
    assert exhausted.code == "search_budget_exhausted" and exhausted.message_ids == []

    built_on_all = reply(room.general, "Summary of the incidents.", history=near.message_ids)
    assert built_on_all.pk in room.search(room.general, room.bob, "summary incidents").message_ids


def test_a_semantic_provider_outage_degrades_to_lexical_results_never_to_unfiltered_ones(room: Room) -> None:
    class Broken:
        name = "semantic"
        in_database = False

        def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
            raise ConnectionError("vector store unreachable")

    class Hanging:
        name = "semantic"
        in_database = False

        def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
            time.sleep(5)
            return []

    public = room.say(room.general, room.bob, "The Q3 roadmap review is on Thursday.")
    private = room.say(room.alice_dm, room.alice, "The Q3 roadmap review makes me nervous.")
    perspective = perspective_for_conversation(room.general, requester_id=room.bob.pk)
    lexical_only = search_history(perspective=perspective, query=HistoryQuery(text="Q3 roadmap review"), providers=())
    for provider, category in ((Broken(), "semantic_unavailable"), (Hanging(), "semantic_timeout")):
        started = time.monotonic()
        result = search_history(
            perspective=perspective, query=HistoryQuery(text="Q3 roadmap review"), providers=[provider]
        )
        assert time.monotonic() - started < 4.5
        assert found(result) == [public.pk] and private.pk not in result.message_ids
        assert result.degradation == category
        assert ConversationSearchEvent.objects.get(pk=result.event_id).degradation == category
        # Ranked as if the semantic arm had not been asked: the arm that failed is not in the fusion's scale.
        assert [(h.message.message_id, h.components["match"]) for h in result.hits] == [
            (h.message.message_id, h.components["match"]) for h in lexical_only.hits
        ]


def test_two_actors_with_the_same_display_name_stay_distinct_through_stable_ids(room: Room) -> None:
    sam_a = ActorFactory.create(connector=room.connector, display_name="Sam", external_id="U901")
    sam_b = ActorFactory.create(connector=room.connector, display_name="Sam", external_id="U902")
    by_a = room.say(room.general, sam_a, "I will own the deploy checklist.")
    by_b = room.say(room.general, sam_b, "I will own the deploy rollback plan.")

    both = room.search(room.general, room.bob, "deploy own", actor="Sam")
    only_a = room.search(room.general, room.bob, "deploy own", actor="U901")
    nobody = room.search(room.general, room.bob, "deploy own", actor="Samantha")

    assert set(found(both)) == {by_a.pk, by_b.pk}
    assert found(only_a) == [by_a.pk]
    assert {hit.message.actor for hit in both.hits} == {"Sam (id U901)", "Sam (id U902)"}
    assert nobody.hits == [] and nobody.message_ids == []  # an unresolvable actor narrows to nothing


def test_the_requester_filter_takes_in_linked_identities_until_the_link_is_revoked(
    room: Room,
) -> None:
    email = ConnectorFactory.create(agent=room.agent, type="email", name="acme.com")
    alice_mail = ActorFactory.create(connector=email, display_name="Alice", external_id="alice@acme.com")
    by_slack = room.say(room.general, room.alice, "The deploy freeze starts on Monday.")
    room.say(room.general, room.bob, "The deploy freeze ends on Friday.")
    first, second = sorted([room.alice, alice_mail], key=lambda a: a.pk)
    link = IdentityLink.objects.create(
        agent=room.agent,
        actor_a=first,
        actor_b=second,
        proof="confirmed from both accounts",
        verified_at=timezone.now(),
    )
    # Alice's mail identity asks in the shared channel for what she said herself.
    linked = room.search(room.general, alice_mail, "deploy freeze", actor="requester")
    assert found(linked) == [by_slack.pk]  # Bob said the other one

    link.revoked_at = timezone.now()
    link.save(update_fields=["revoked_at"])
    assert found(room.search(room.general, alice_mail, "deploy freeze", actor="requester")) == []
