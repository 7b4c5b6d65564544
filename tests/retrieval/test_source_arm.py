"""Memory recall's source arm: recall's candidates are ranked by the words of the messages they were
learned from, only through messages the audience may see, and the arm adds no candidate of its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Actor
from history.models import Conversation
from memory.models import MemoryRevision
from memory.retrieval import sources
from memory.retrieval.arms import sql_arms
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery, form_query
from memory.retrieval.service import recall_providers
from memory.retrieval.sources import SourceMessages
from memory.services import Belief, Provenance, entry_forget, memory_remember, revision_amend
from tests.factories import public_channel
from tests.retrieval.conftest import Workspace, revision_ids
from tests.retrieval.test_eligibility_rules import grant

#: Recall's lexical arm and the source arm over the messages' words: no vectors needed.
WITH_SOURCES = [SourceMessages(())]
#: The message says what the question asks; the statement learned from it shares one word with it.
SAID = "The kiwi offsite moved to Lisbon because the visas were late."
LEARNED = "The kiwi team meets in Portugal."
QUESTION = "Why did the kiwi offsite move?"


def learn(
    ws: Workspace, said_in: Conversation, by: Actor, said: str, statement: str, **belief: object
) -> MemoryRevision:
    message = ws.say(said_in, by, said)
    return memory_remember(
        agent=ws.agent,
        belief=Belief(body=statement, **belief),  # type: ignore[arg-type]
        provenance=Provenance(source_message_id=message.pk),
    ).revision


def ranked(
    ws: Workspace, conversation: Conversation, requester: Actor, text: str, *, known_at: datetime | None = None
) -> list[int]:
    """What the source arm itself ranks, in its order, over the pool recall's lexical arm gathered."""
    perspective = perspective_for_conversation(conversation, requester_id=requester.pk)
    query = form_query(message=text, requester_id=requester.pk, known_actors=[ws.alice, ws.bob, ws.victor])
    eligible = EligibleRevisions(perspective, named_subject_ids=query.named_subject_ids, known_at=known_at)
    pool = sql_arms(eligible, query).pool
    return [hit.target_id for hit in SourceMessages(()).rank(eligible, query, pool)]


def test_a_memory_is_lifted_by_the_words_of_the_message_it_was_learned_from(ws: Workspace) -> None:
    by_own_words = learn(ws, ws.general, ws.bob, "Noted.", "The kiwi offsite moved: kiwi offsite, moved.")
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    alone = ws.ask(ws.general, ws.alice, QUESTION, providers=())
    assert revision_ids(alone)[:2] == [by_own_words.pk, meets.pk]
    found = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    assert revision_ids(found)[:2] == [meets.pk, by_own_words.pk]
    items = {item.revision_id: item for item in found.items}
    assert items[meets.pk].arms == ["lexical", "source"]
    assert items[by_own_words.pk].arms == ["lexical"]


def test_the_source_arm_weighs_twice_a_relevance_arm_in_the_fusion(ws: Workspace) -> None:
    """First by its own words alone, against the lexical arm (1) and the source arm (2): a third of the
    best possible match (``ARM_WEIGHTS``)."""
    by_own_words = learn(ws, ws.general, ws.bob, "Noted.", "The kiwi offsite moved: kiwi offsite, moved.")
    learn(ws, ws.general, ws.bob, SAID, LEARNED)

    found = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    items = {item.revision_id: item for item in found.items}
    assert items[by_own_words.pk].components["match"] == pytest.approx(1 / 3, abs=1e-3)


def test_where_the_source_arm_ranked_the_fusion_constant_is_history_searchs(ws: Workspace) -> None:
    """Reciprocal rank at k 10 where the source arm ranked (``SOURCE_RRF_K``), at 60 without it: the
    memory second by its own words and first by its source."""
    by_own_words = learn(ws, ws.general, ws.bob, "Noted.", "The kiwi offsite moved: kiwi offsite, moved.")
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    alone = {item.revision_id: item for item in ws.ask(ws.general, ws.alice, QUESTION, providers=()).items}
    assert alone[meets.pk].arms == ["lexical"] and alone[by_own_words.pk].components["match"] == 1.0
    assert alone[meets.pk].components["match"] == pytest.approx((1 / 62) / (1 / 61), abs=1e-4)
    found = {item.revision_id: item for item in ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES).items}
    assert found[meets.pk].components["match"] == pytest.approx((1 / 12 + 2 / 11) / (3 / 11), abs=1e-4)


def test_the_source_arm_adds_no_candidate(ws: Workspace) -> None:
    """A memory whose own words and meaning no arm matched is not found through its source: the arm
    ranks the pool the other arms gathered."""
    unmatched = learn(ws, ws.general, ws.bob, SAID, "The team meets in Portugal.")

    assert ranked(ws, ws.general, ws.alice, QUESTION) == []
    assert unmatched.pk not in revision_ids(ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES))


def test_a_message_the_audience_may_not_see_lifts_no_memory(ws: Workspace) -> None:
    """Learned in Alice's DM and shared into #general: the memory may be shown there, its source may not
    be read there, so the source's words do not rank it."""
    shared = learn(ws, ws.alice_dm, ws.alice, SAID, LEARNED)
    grant(shared.pk, ws.agent.pk, ws.general)

    assert ranked(ws, ws.general, ws.bob, QUESTION) == []
    in_general = ws.ask(ws.general, ws.bob, QUESTION, providers=WITH_SOURCES)
    assert [item.arms for item in in_general.items if item.revision_id == shared.pk] == [["lexical"]]
    # Where the source may be read, the same words rank it: the message's audience is the difference.
    assert ranked(ws, ws.alice_dm, ws.alice, QUESTION) == [shared.pk]


def test_the_source_arm_ranks_only_memories_the_destination_may_see(ws: Workspace) -> None:
    """The source message is public and found from another channel; the memory learned from it is
    restricted to #general, so the arm does not rank it there, and recall does not return it."""
    only_here = learn(ws, ws.general, ws.victor, SAID, LEARNED, restricted_to_conversation_id=ws.general.pk)
    elsewhere = public_channel(ws.connector, project="atlas")
    perspective = perspective_for_conversation(elsewhere, requester_id=ws.bob.pk)
    searched = search_history(perspective=perspective, query=HistoryQuery(text=QUESTION), providers=())
    assert searched.hits, "the source message is readable from the other channel"

    assert ranked(ws, elsewhere, ws.bob, QUESTION) == []
    assert only_here.pk not in revision_ids(ws.ask(elsewhere, ws.bob, QUESTION, providers=WITH_SOURCES))
    assert ranked(ws, ws.general, ws.bob, QUESTION) == [only_here.pk]


def test_a_forgotten_memory_does_not_return_through_its_source(ws: Workspace) -> None:
    gone = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    assert ranked(ws, ws.general, ws.alice, QUESTION) == [gone.pk]
    entry_forget(agent=ws.agent, entry_id=gone.entry_id)

    assert ranked(ws, ws.general, ws.alice, QUESTION) == []
    assert gone.pk not in revision_ids(ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES))


def test_a_source_that_matched_nothing_ranks_nothing(ws: Workspace) -> None:
    """A memory in the pool by its own words, learned from a line that does not match the question, takes
    no rank from the arm: the arm's silence about it says nothing."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    learn(ws, ws.general, ws.alice, "Oh no, that is a shame.", "Alice was sad about the kiwi offsite.")

    assert ranked(ws, ws.general, ws.victor, QUESTION) == [meets.pk]


def test_memories_take_the_rank_of_the_message_they_were_learned_from(ws: Workspace) -> None:
    """Written weaker first, so that the order is the messages' and not the memories' ids."""
    weak = learn(ws, ws.general, ws.bob, "Someone mentioned the offsite.", "There is a kiwi offsite.")
    strong = learn(
        ws, ws.general, ws.bob, "The kiwi offsite moved: kiwi visas, kiwi offsite, moved.", "Kiwi plans changed."
    )

    assert ranked(ws, ws.general, ws.alice, QUESTION) == [strong.pk, weak.pk]


def test_only_the_strongest_source_messages_rank_memories(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SOURCE_MESSAGES`` of the pool's source messages, the strongest, give ranks; the rest give none."""
    weak = learn(ws, ws.general, ws.bob, "Someone mentioned the offsite.", "There is a kiwi offsite.")
    strong = learn(
        ws, ws.general, ws.bob, "The kiwi offsite moved: kiwi visas, kiwi offsite, moved.", "Kiwi plans changed."
    )

    monkeypatch.setattr(sources, "SOURCE_MESSAGES", 1)
    assert ranked(ws, ws.general, ws.alice, QUESTION) == [strong.pk]
    monkeypatch.setattr(sources, "SOURCE_MESSAGES", 2)
    assert ranked(ws, ws.general, ws.alice, QUESTION) == [strong.pk, weak.pk]


def test_an_amended_memory_keeps_the_message_it_was_learned_from(ws: Workspace) -> None:
    """ "Was true but changed": the entry's current revision is ranked through the first one's source."""
    first = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    amended = revision_amend(
        agent=ws.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(),
        body="The kiwi team meets in Porto.",
    ).revision

    assert ranked(ws, ws.general, ws.alice, QUESTION) == [amended.pk]


def test_a_historical_recall_gets_nothing_from_the_source_arm(ws: Workspace) -> None:
    """The store as it stood at ``known_at``; the messages' documents and vectors have no such bound."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    assert ranked(ws, ws.general, ws.alice, QUESTION) == [meets.pk]
    assert ranked(ws, ws.general, ws.alice, QUESTION, known_at=timezone.now()) == []


def test_without_vectors_the_source_arm_stays_out_where_the_setting_is_on(ws: Workspace, settings: Any) -> None:
    """By their words alone the source messages ranked worse than recall's own arms: the product
    without pgvector (here: no live generation) recalls without the arm."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    settings.ENGRAM_RECALL_SOURCE_ARM = True

    assert not any(isinstance(p, SourceMessages) for p in recall_providers()[0])
    found = ws.ask(ws.general, ws.alice, QUESTION)
    assert [item.arms for item in found.items if item.revision_id == meets.pk] == [["lexical"]]
    assert found.rendered.startswith('<memory policy="retrieval@3"')
    # Given explicitly, it runs over the words alone, and names itself in the policy.
    given = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    assert given.rendered.startswith('<memory policy="retrieval@3+source@2"')


def test_a_silent_source_arm_changes_nothing(ws: Workspace) -> None:
    """The arm ran and no message matched: the memory found by its own words ranks as without the arm,
    under the plain policy (the arm's silence says nothing about memories it cannot rank)."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    question = "Where does the team meet, Portugal?"

    assert ranked(ws, ws.general, ws.alice, question) == []
    alone = ws.ask(ws.general, ws.alice, question, providers=())
    silent = ws.ask(ws.general, ws.alice, question, providers=WITH_SOURCES)
    assert revision_ids(silent) == revision_ids(alone) == [meets.pk]
    assert [i.components["match"] for i in silent.items] == [i.components["match"] for i in alone.items]
    assert silent.rendered.startswith('<memory policy="retrieval@3"')
    assert not silent.rendered.startswith('<memory policy="retrieval@3+source@2"')


class UnreachableVectors:
    """The semantic arm with its vector store gone: every call fails."""

    name = "semantic"
    in_database = False

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        raise ConnectionError("vector store unreachable")


def test_where_the_semantic_arm_failed_the_source_arm_does_not_run(ws: Workspace) -> None:
    """The source arm runs with the semantic arm: where that failed (or missed its deadline) the read
    degrades to what the SQL arms found, ranked as without either arm, and says so."""
    by_own_words = learn(ws, ws.general, ws.bob, "Noted.", "The kiwi offsite moved: kiwi offsite, moved.")
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    ranking = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    assert revision_ids(ranking)[:2] == [meets.pk, by_own_words.pk]
    degraded = ws.ask(ws.general, ws.alice, QUESTION, providers=[UnreachableVectors(), *WITH_SOURCES])
    alone = ws.ask(ws.general, ws.alice, QUESTION, providers=())
    assert degraded.degradation == "semantic_unavailable"
    assert revision_ids(degraded) == revision_ids(alone)
    assert [item.arms for item in degraded.items] == [item.arms for item in alone.items]
    assert "source" not in {arm for item in degraded.items for arm in item.arms}
    assert degraded.rendered.startswith('<memory policy="retrieval@3"')
    assert not degraded.rendered.startswith('<memory policy="retrieval@3+source@2"')
