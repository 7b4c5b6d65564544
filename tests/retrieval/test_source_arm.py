"""Memory recall's source arm: a memory is found by the words of the message it was learned from, and
only through messages the audience may see, and only when the memory itself is eligible."""

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
from memory.retrieval.eligibility import EligibleMessages, EligibleRevisions, perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import form_query
from memory.retrieval.service import recall_providers
from memory.retrieval.sources import SourceMessages
from memory.services import Belief, Provenance, entry_forget, memory_remember, revision_amend
from tests.factories import public_channel
from tests.retrieval.conftest import Workspace, revision_ids
from tests.retrieval.test_eligibility_rules import grant

#: Recall's lexical arm and the source arm (through history's lexical arm): no vectors needed.
WITH_SOURCES = [SourceMessages(())]
#: The message says what the question asks; the statement learned from it shares none of its words.
SAID = "The kiwi offsite moved to Lisbon because the visas were late."
LEARNED = "The team meets in Portugal."
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


def proposed(
    ws: Workspace, conversation: Conversation, requester: Actor, text: str, *, known_at: datetime | None = None
) -> list[int]:
    """What the source arm itself proposes, before the arms statement judges the ids again."""
    perspective = perspective_for_conversation(conversation, requester_id=requester.pk)
    query = form_query(message=text, requester_id=requester.pk, known_actors=[ws.alice, ws.bob, ws.victor])
    eligible = EligibleRevisions(perspective, named_subject_ids=query.named_subject_ids, known_at=known_at)
    return [hit.target_id for hit in SourceMessages(()).candidates(eligible, query, 50)]


def test_a_memory_is_found_by_the_words_of_the_message_it_was_learned_from(ws: Workspace) -> None:
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    assert meets.pk not in revision_ids(ws.ask(ws.general, ws.alice, QUESTION, providers=()))
    found = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    (item,) = [item for item in found.items if item.revision_id == meets.pk]
    assert item.arms == ["source"]
    assert item.reason.startswith("source #1")


def test_a_message_the_audience_may_not_see_lifts_no_memory(ws: Workspace) -> None:
    """Learned in Alice's DM and shared into #general: the memory may be shown there, its source may not
    be read there, so the source's words do not find it."""
    shared = learn(ws, ws.alice_dm, ws.alice, SAID, LEARNED)
    grant(shared.pk, ws.agent.pk, ws.general)

    assert proposed(ws, ws.general, ws.bob, QUESTION) == []
    assert shared.pk not in revision_ids(ws.ask(ws.general, ws.bob, QUESTION, providers=WITH_SOURCES))
    # Where the source may be read, the same words find it: the message's audience is the difference.
    assert proposed(ws, ws.alice_dm, ws.alice, QUESTION) == [shared.pk]
    # And in #general the memory itself is eligible: its own words find it there.
    assert shared.pk in revision_ids(ws.ask(ws.general, ws.bob, "Where does the team meet, Portugal?"))


def test_the_source_arm_proposes_only_memories_the_destination_may_see(ws: Workspace) -> None:
    """The source message is public and found from another channel; the memory learned from it is
    restricted to #general, so the arm does not propose it there, and recall does not return it."""
    only_here = learn(ws, ws.general, ws.victor, SAID, LEARNED, restricted_to_conversation_id=ws.general.pk)
    elsewhere = public_channel(ws.connector, project="atlas")
    perspective = perspective_for_conversation(elsewhere, requester_id=ws.bob.pk)
    searched = search_history(perspective=perspective, query=HistoryQuery(text=QUESTION), providers=())
    assert searched.hits, "the source message is readable from the other channel"

    assert proposed(ws, elsewhere, ws.bob, QUESTION) == []
    assert only_here.pk not in revision_ids(ws.ask(elsewhere, ws.bob, QUESTION, providers=WITH_SOURCES))
    assert proposed(ws, ws.general, ws.bob, QUESTION) == [only_here.pk]


def test_a_forgotten_memory_does_not_return_through_its_source(ws: Workspace) -> None:
    gone = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    assert proposed(ws, ws.general, ws.alice, QUESTION) == [gone.pk]
    entry_forget(agent=ws.agent, entry_id=gone.entry_id)

    assert proposed(ws, ws.general, ws.alice, QUESTION) == []
    assert gone.pk not in revision_ids(ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES))


def test_a_neighbour_that_matched_nothing_speaks_for_no_memory(ws: Workspace) -> None:
    """History search lifts the lines next to a strong match; the source arm takes only messages that
    matched the question themselves."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    learn(ws, ws.general, ws.alice, "Oh no, that is a shame.", "Alice was disappointed.")

    assert proposed(ws, ws.general, ws.victor, QUESTION) == [meets.pk]


def test_memories_take_the_rank_of_the_message_they_were_learned_from(ws: Workspace) -> None:
    """Written weaker first, so that the order is the messages' and not the memories' ids."""
    weak = learn(ws, ws.general, ws.bob, "Someone mentioned the offsite.", "There is an offsite.")
    strong = learn(ws, ws.general, ws.bob, "The kiwi offsite moved: kiwi visas, kiwi offsite, moved.", "Plans changed.")

    assert proposed(ws, ws.general, ws.alice, QUESTION) == [strong.pk, weak.pk]


def test_history_search_ranks_a_pool_of_source_pool_candidates_per_arm_for_the_arm(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arm's ranking reads the best ``SOURCE_POOL`` eligible matches, not the search's 200."""
    weak = learn(ws, ws.general, ws.bob, "Someone mentioned the offsite.", "There is an offsite.")
    strong = learn(ws, ws.general, ws.bob, "The kiwi offsite moved: kiwi visas, kiwi offsite, moved.", "Plans changed.")

    monkeypatch.setattr(sources, "SOURCE_POOL", 1)
    assert proposed(ws, ws.general, ws.alice, QUESTION) == [strong.pk]
    monkeypatch.setattr(sources, "SOURCE_POOL", 2)
    assert proposed(ws, ws.general, ws.alice, QUESTION) == [strong.pk, weak.pk]


def test_an_amended_memory_keeps_the_message_it_was_learned_from(ws: Workspace) -> None:
    """ "Was true but changed": the entry's current revision is proposed through the first one's source,
    and the revision it replaced is not."""
    first = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    amended = revision_amend(
        agent=ws.agent,
        entry_id=first.entry_id,
        expected_revision_id=first.pk,
        provenance=Provenance(),
        body="The team meets in Porto.",
    ).revision

    assert proposed(ws, ws.general, ws.alice, QUESTION) == [amended.pk]


def test_a_historical_recall_gets_nothing_from_the_source_arm(ws: Workspace) -> None:
    """The store as it stood at ``known_at``; the transcript's ranking has no such bound."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    assert proposed(ws, ws.general, ws.alice, QUESTION) == [meets.pk]
    assert proposed(ws, ws.general, ws.alice, QUESTION, known_at=timezone.now()) == []


class UnreachableMessageVectors:
    """History search's semantic arm, when its vector store cannot be reached."""

    name = "semantic"
    in_database = False

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
        raise ConnectionError("vector store unreachable")


def test_when_history_search_degrades_the_arm_fails_whole_and_recall_says_so(ws: Workspace) -> None:
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    degraded = ws.ask(ws.general, ws.alice, QUESTION, providers=[SourceMessages([UnreachableMessageVectors()])])
    assert degraded.degradation == "source_unavailable"
    assert meets.pk not in revision_ids(degraded)
    assert not degraded.rendered.startswith('<memory policy="retrieval@3+source@1"')


def test_the_source_arm_runs_where_the_setting_turns_it_on_and_names_itself_in_the_policy(
    ws: Workspace, settings: Any
) -> None:
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)

    settings.ENGRAM_RECALL_SOURCE_ARM = False
    assert not any(isinstance(p, SourceMessages) for p in recall_providers()[0])
    off = ws.ask(ws.general, ws.alice, QUESTION)
    assert meets.pk not in revision_ids(off)
    assert off.rendered.startswith('<memory policy="retrieval@3"')

    settings.ENGRAM_RECALL_SOURCE_ARM = True
    assert any(isinstance(p, SourceMessages) for p in recall_providers()[0])
    on = ws.ask(ws.general, ws.alice, QUESTION)
    assert meets.pk in revision_ids(on)
    assert on.rendered.startswith('<memory policy="retrieval@3+source@1"')


def test_a_silent_source_arm_changes_nothing(ws: Workspace) -> None:
    """The arm ran and no message matched: the memory found by its own words ranks as without the arm,
    under the plain policy (the arm's silence says nothing about memories it cannot rank)."""
    meets = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    question = "Where does the team meet, Portugal?"

    assert proposed(ws, ws.general, ws.alice, question) == []
    alone = ws.ask(ws.general, ws.alice, question, providers=())
    silent = ws.ask(ws.general, ws.alice, question, providers=WITH_SOURCES)
    assert revision_ids(silent) == revision_ids(alone) == [meets.pk]
    assert [i.components["match"] for i in silent.items] == [i.components["match"] for i in alone.items]
    assert silent.rendered.startswith('<memory policy="retrieval@3"')
    assert not silent.rendered.startswith('<memory policy="retrieval@3+source@1"')


def test_the_source_arm_weighs_twice_a_relevance_arm_in_the_fusion(ws: Workspace) -> None:
    """First through its source against first by its own words: the source arm's first place counts
    double (``ARM_WEIGHTS``), so the memory its message answers for leads."""
    through_source = learn(ws, ws.general, ws.bob, SAID, LEARNED)
    by_own_words = learn(ws, ws.general, ws.bob, "Noted.", "The kiwi offsite happens every spring.")

    found = ws.ask(ws.general, ws.alice, QUESTION, providers=WITH_SOURCES)
    items = {item.revision_id: item for item in found.items}
    assert items[through_source.pk].arms == ["source"] and items[by_own_words.pk].arms == ["lexical"]
    assert items[through_source.pk].components["match"] == pytest.approx(
        2 * items[by_own_words.pk].components["match"], abs=1e-3
    )
    assert revision_ids(found)[:2] == [through_source.pk, by_own_words.pk]
