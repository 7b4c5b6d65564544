"""History search orders the lexical arm's matches by BM25 over the eligible pool (history@4): a rare
query term outweighs a common one, and the statistics are read from the pool's own documents only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from history.models import EvidenceMethod
from history.services import message_ingest
from memory.retrieval.eligibility import EligibleMessages, perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.history_search.candidates import lexical_pool, revalidate
from memory.retrieval.history_search.ranking import PoolDocument, lexical_order
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, make_message, public_channel

pytestmark = pytest.mark.django_db


def test_a_rare_query_term_outranks_a_common_one_repeated() -> None:
    """ "project" is in every message but one, "kayak" in that one: ``ts_rank`` put the message that
    repeats "project" first; BM25 weighs "kayak" by its rarity in the pool and puts it first."""
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    alice, bob = (ActorFactory.create(connector=connector, display_name=n) for n in ("Alice", "Bob"))
    room = public_channel(connector, title="#general")
    now = timezone.now()

    def say(body: str, days: int) -> int:
        return message_ingest(
            conversation=room,
            actor=alice,
            body=body,
            created_at=now - timedelta(days=days),
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        ).message.pk

    kayak = say("On the trip we rented a kayak.", 30)
    repeated = say("Project update: the project plan, the project budget, the project team.", 20)
    for day in range(1, 8):
        say(f"Project note number {day}.", day)
    result = search_history(
        perspective=perspective_for_conversation(room, requester_id=bob.pk),
        query=HistoryQuery(text="project kayak", limit=10),
        providers=(),
    )
    ranked = [hit.message.message_id for hit in result.hits]
    assert ranked[0] == kayak
    assert ranked.index(kayak) < ranked.index(repeated)


def test_the_pools_documents_are_those_of_the_messages_it_admitted_only() -> None:
    """BM25's statistics come from the pool alone. The scan returns its last match whatever its verdict
    (to carry the exclusion counts) and the re-validation is asked about ids it may refuse: neither
    brings the document of a message the eligible set did not admit, nor of another agent's message."""
    agent, other_agent = AgentFactory.create(), AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    other_connector = ConnectorFactory.create(agent=other_agent, type="slack", name="other")
    alice = ActorFactory.create(connector=connector, display_name="Alice")
    mallory = ActorFactory.create(connector=other_connector, display_name="Mallory")
    general = public_channel(connector, title="#general")
    # Created first, so the lowest id: of equal matches, the scan's last.
    unproven = make_message(general, actor=alice, body="A kayak nobody vouched for.", evidence=None)
    mine = make_message(general, actor=alice, body="Kayak, kayak and a canoe.")
    proposed = make_message(general, actor=alice, body="We paddled all day.")
    refused = make_message(general, actor=alice, body="Paddling with no provenance.", evidence=None)
    theirs = make_message(public_channel(other_connector, title="#general"), actor=mallory, body="Their kayak.")
    eligible = EligibleMessages(perspective_for_conversation(general, requester_id=alice.pk))
    params = {**eligible.params(), "q_text": "kayak trips", "q_excluded": [], "q_cap": 10}

    scanned = lexical_pool(eligible, "", params)
    assert [row[0] for row in scanned.ranked] == [mine.pk]
    assert scanned.counts["no_evidence"] == 1  # the unproven match was read, judged and refused
    assert set(scanned.documents) == {mine.pk}
    # Each query term it holds counts once, and its length is its distinct lexemes ("kayak", "canoe").
    assert scanned.documents[mine.pk] == PoolDocument(length=2, terms=frozenset({"kayak"}))

    admitted, documents = revalidate(eligible, "", params, {proposed.pk, refused.pk, theirs.pk, unproven.pk})
    assert [row[0] for row in admitted] == [proposed.pk]
    assert documents == {proposed.pk: PoolDocument(length=2, terms=frozenset())}  # "paddl", "day"


def test_lexical_order_keeps_the_arms_order_on_ties_and_without_documents() -> None:
    documents = {
        1: PoolDocument(length=4, terms=frozenset({"common"})),
        2: PoolDocument(length=4, terms=frozenset({"rare"})),
        3: PoolDocument(length=4, terms=frozenset({"common"})),
        4: PoolDocument(length=4, terms=frozenset({"common"})),
    }
    assert lexical_order([1, 3, 2], documents) == [2, 1, 3]
    assert lexical_order([3, 1], documents) == [3, 1]
    assert lexical_order([3, 1, 2], {}) == [3, 1, 2]
