"""A text written a moment ago holds its rank before the worker embeds it. Until its vector exists the
semantic arm cannot rank it, so the fusion matches it over the arms that can (lexical) instead of
reading the missing vector as a poor match; once embedded it is fused over both arms like any other.
Here the worker never runs on its own: ``drain`` embeds what is pending when the test says so."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history.models import Message
from memory.embeddings import search as semantic_search
from memory.embeddings.index import drain_outbox
from memory.embeddings.model import embedding_model
from memory.models import MessageEmbedding, RevisionEmbedding
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, HistoryResult, search_history
from memory.retrieval.history_search.ranking import fused_match
from tests.factories import public_channel
from tests.retrieval.conftest import Workspace, revision_ids

pytestmark = pytest.mark.usefixtures("pgvector")

QUESTION = "Where are the zorbanite samples?"
#: Close in meaning to the question and sharing its common word, but not its rare one.
LOOK_ALIKES = (
    "Where did we put the granite samples?",
    "We put the rock samples in the geology lab.",
    "Did anyone see where the mineral samples went?",
)
FRESH = "The zorbanite samples are in locker 12."


def drain() -> None:
    while drain_outbox():
        pass


def search_from_outside(ws: Workspace) -> HistoryResult:
    """Bob searches from his DM for what was said in the workspace's channels."""
    return search_history(
        perspective=perspective_for_conversation(ws.bob_dm, requester_id=ws.bob.pk),
        query=HistoryQuery(text=QUESTION, limit=10),
    )


def hit_ids(result: HistoryResult) -> list[int]:
    return [hit.message.message_id for hit in result.hits]


def match_of(result: HistoryResult, message: Message) -> float:
    return next(hit.components["match"] for hit in result.hits if hit.message.message_id == message.pk)


def test_a_message_not_yet_embedded_is_found_first_for_its_rare_word(ws: Workspace) -> None:
    """Each look-alike was said in a channel of its own, earlier; the fresh line was just said in
    #general. Before its vector exists it is first, matched over the lexical arm alone (first there: the
    best match it can have); once embedded it is fused over both arms, and still first."""
    look_alikes = [ws.say(public_channel(ws.connector), ws.alice, body) for body in LOOK_ALIKES]
    drain()
    fresh = ws.say(ws.general, ws.alice, FRESH)  # the worker has not embedded it yet
    assert not MessageEmbedding.objects.filter(message=fresh).exists()

    before = search_from_outside(ws)

    assert before.degradation == ""  # the semantic arm ran, and ranked the look-alikes
    assert hit_ids(before)[0] == fresh.pk and set(hit_ids(before)) == {fresh.pk, *(m.pk for m in look_alikes)}
    assert match_of(before, fresh) == 1.0
    assert all(match_of(before, m) < 1.0 for m in look_alikes)

    drain()
    assert MessageEmbedding.objects.filter(message=fresh).exists()
    after = search_from_outside(ws)

    # The semantic arm now ranks it too (moving the look-alikes down a place there): the order holds.
    assert hit_ids(after) == hit_ids(before)


def test_a_memory_not_yet_embedded_is_recalled_first_for_its_rare_word(ws: Workspace) -> None:
    look_alikes = [ws.remember(body, said_in=ws.general, by=ws.alice) for body in LOOK_ALIKES]
    drain()
    fresh = ws.remember(FRESH, said_in=ws.general, by=ws.alice)
    assert not RevisionEmbedding.objects.filter(revision=fresh).exists()

    before = ws.ask(ws.bob_dm, ws.bob, QUESTION)

    assert before.degradation == ""
    assert {r.pk for r in look_alikes} <= {i.revision_id for i in before.items if "semantic" in i.arms}
    assert revision_ids(before)[0] == fresh.pk
    # Neither the memory nor the message it was learned from has a vector yet: both are ranked by words.
    assert before.items[0].arms == ["lexical", "source"] and before.items[0].components["match"] == 1.0

    drain()
    after = ws.ask(ws.bob_dm, ws.bob, QUESTION)

    # Still first, and the same items. The look-alikes' order among themselves is not the contract:
    # their fused scores are near ties, which the model's arithmetic orders either way on different
    # processors (with and without AVX-512).
    assert revision_ids(after)[0] == fresh.pk
    assert set(revision_ids(after)) == set(revision_ids(before))
    assert after.items[0].arms == ["lexical", "semantic", "source"]


def statements_reading(captured: CaptureQueriesContext, table: str) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if table in q["sql"]]


def test_which_texts_lack_a_vector_is_read_with_the_candidates(ws: Workspace) -> None:
    """The fresh-line rule costs no round trip of its own: the vectors are read by the semantic arm's
    search and, for the rule, by the statement that reads the candidates (recall's arms statement,
    history search's scan), and by no other statement."""
    for body in LOOK_ALIKES:
        ws.remember(body, said_in=ws.general, by=ws.alice)
    drain()
    fresh = ws.remember(FRESH, said_in=ws.general, by=ws.alice)

    with CaptureQueriesContext(connection) as recalled:
        result = ws.ask(ws.bob_dm, ws.bob, QUESTION)
    with CaptureQueriesContext(connection) as searched:
        found = search_from_outside(ws)

    assert revision_ids(result)[0] == fresh.pk and result.items[0].components["match"] == 1.0
    assert found.hits and found.degradation == ""
    recall_reads = statements_reading(recalled, RevisionEmbedding._meta.db_table)
    assert len(recall_reads) == 2 and "conflict_partners" in recall_reads[1]
    search_reads = statements_reading(searched, MessageEmbedding._meta.db_table)
    assert len(search_reads) == 2 and "DECLARE" in search_reads[0]


def test_only_an_arm_that_cannot_rank_a_text_leaves_its_scale() -> None:
    """First in the lexical arm and absent from the semantic one: half the best match when the semantic
    arm holds the text's vector and passed it over (a poor semantic match), the best match when it has
    no vector to rank yet. Another text's missing vector changes nothing for this one."""
    ranks = {"lexical": {1: 1, 2: 2}, "semantic": {2: 1}}
    arms = ["lexical", "semantic"]

    assert fused_match(1, ranks, arms) == pytest.approx(0.5)
    assert fused_match(1, ranks, arms, {"semantic": {3}}) == pytest.approx(0.5)
    assert fused_match(1, ranks, arms, {"semantic": {1}}) == 1.0
    assert fused_match(2, ranks, arms, {"semantic": {1}}) == fused_match(2, ranks, arms)
    assert fused_match(1, ranks, arms, {"semantic": {1}, "lexical": {1}}) == 0.0


def test_a_recall_embeds_its_question_once_for_its_own_and_its_source_arm(
    ws: Workspace, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory recall's semantic arm and its source arm (the source messages' meaning) read the same
    question: the model embeds it once per recall, and again for the next recall (nothing is kept beyond
    the read)."""
    settings.ENGRAM_RECALL_SOURCE_ARM = True
    ws.remember(FRESH, said_in=ws.general, by=ws.alice)
    drain()
    model = embedding_model()
    embedded: list[str] = []

    class Counting:
        def embed(self, texts: list[str]) -> np.ndarray:
            embedded.extend(texts)
            return model.embed(texts)

    monkeypatch.setattr(semantic_search, "embedding_model", lambda name=None: Counting())

    first = ws.ask(ws.bob_dm, ws.bob, QUESTION)
    assert first.degradation == "" and {"semantic", "source"} <= {arm for i in first.items for arm in i.arms}
    assert embedded == [QUESTION]
    ws.ask(ws.bob_dm, ws.bob, QUESTION)
    assert embedded == [QUESTION, QUESTION]
