"""History search's lexical scan: it reads the sidecar's matches best first, judging each, until the
pool is full or the matches run out. A small cap stands in for the production one (a pool of 200),
so that a few messages exercise every way the scan ends."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from accounts.models import Actor, Connector
from history.models import Conversation, ConversationSearchEvent
from memory.retrieval import history_search
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, HistoryResult, search_history
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, Speaks, direct_conversation, public_channel

pytestmark = pytest.mark.django_db


@dataclass
class Room(Speaks):
    connector: Connector
    alice: Actor
    bob: Actor
    alice_dm: Conversation
    bob_dm: Conversation
    general: Conversation

    def search(self, conversation: Conversation, requester: Actor, text: str, limit: int = 10) -> HistoryResult:
        return search_history(
            perspective=perspective_for_conversation(conversation, requester_id=requester.pk),
            query=HistoryQuery(text=text, limit=limit),
            providers=(),
        )


@pytest.fixture
def room(monkeypatch: pytest.MonkeyPatch) -> Room:
    monkeypatch.setattr(history_search.search, "CANDIDATE_CAP", 3)
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice, bob = (ActorFactory.create(connector=connector, display_name=n) for n in ("Alice", "Bob"))
    return Room(
        connector=connector,
        alice=alice,
        bob=bob,
        alice_dm=direct_conversation(connector, alice),
        bob_dm=direct_conversation(connector, bob),
        general=public_channel(connector, title="#general"),
    )


def counts(result: HistoryResult) -> dict[str, int]:
    return dict(ConversationSearchEvent.objects.get(pk=result.event_id).exclusion_counts)


def test_eligible_matches_ranked_below_many_ineligible_ones_are_still_reached(room: Room) -> None:
    """Bob's direct messages outrank Alice's for the query, and none of them is Alice's to see: the
    scan passes all twelve, counting each, until it reaches hers."""
    for n in range(12):
        room.say(room.bob_dm, room.bob, f"Lighthouse lighthouse lighthouse keeper notes, part {n}.")
    alices = [
        room.say(room.alice_dm, room.alice, f"I walked past the lighthouse on day {n} of the trip.") for n in range(2)
    ]
    result = room.search(room.alice_dm, room.alice, "lighthouse")
    assert sorted(hit.message.message_id for hit in result.hits) == sorted(m.pk for m in alices)
    assert counts(result)["audience"] == 12


def test_the_scan_stops_judging_once_the_pool_is_full(room: Room) -> None:
    """Ten public matches, a pool of three: the first read fills it, and the seven matches below it
    are never judged, so they count neither as exclusions nor as eligible ones below the cut-off."""
    for n in range(10):
        room.say(room.general, room.bob, f"Release checklist item {n}: tag the build.")
    result = room.search(room.general, room.alice, "checklist", limit=1)
    assert len(result.hits) == 1
    assert counts(result)["below_cutoff"] == 2


def test_a_scan_that_runs_out_of_matches_keeps_what_it_found(room: Room) -> None:
    """Fewer matches than the pool holds, half of them someone else's: every one is judged once."""
    mine = [room.say(room.alice_dm, room.alice, f"Dentist appointment moved to slot {n}.") for n in range(2)]
    for n in range(2):
        room.say(room.bob_dm, room.bob, f"Dentist appointment for Bob, slot {n}.")
    result = room.search(room.alice_dm, room.alice, "dentist appointment")
    assert sorted(hit.message.message_id for hit in result.hits) == sorted(m.pk for m in mine)
    assert counts(result)["audience"] == 2


def test_the_scan_stops_at_the_match_that_fills_the_pool(room: Room) -> None:
    """Ranked best first: two notes in the team channel, one of Bob's direct messages, a third channel
    note, then another of Bob's. The scan counts the direct message it passed on the way to its third eligible
    match, and never reaches the one below that match."""
    bob_below = room.say(room.bob_dm, room.bob, "Beacon.")
    channel_notes = [room.say(room.general, room.bob, "Beacon beacon beacon check.") for _ in range(2)]
    room.say(room.bob_dm, room.bob, "Beacon beacon.")
    channel_notes.append(room.say(room.general, room.bob, "Beacon."))
    assert bob_below.pk < channel_notes[-1].pk  # equal ranks: the newer message is read first
    result = room.search(room.alice_dm, room.alice, "beacon", limit=3)
    assert sorted(hit.message.message_id for hit in result.hits) == sorted(m.pk for m in channel_notes)
    assert counts(result)["audience"] == 1
    assert counts(result)["below_cutoff"] == 0


def test_the_last_match_is_counted_but_kept_out_of_the_pool_when_ineligible(room: Room) -> None:
    """The scan runs out of matches on one of Bob's direct messages: it carries the scan's totals, and
    takes no place in the pool, although the query names Bob and would rank his message first."""
    mine = room.say(room.alice_dm, room.alice, "Harbour harbour harbour tour booked.")
    room.say(room.bob_dm, room.bob, "Harbour.")
    result = room.search(room.alice_dm, room.alice, "harbour Bob", limit=1)
    assert [hit.message.message_id for hit in result.hits] == [mine.pk]
    assert counts(result)["audience"] == 1
