"""Semantic arms earn their place without ever widening eligibility: paraphrases are found, stale
vectors never revive old text, forgotten memories never return, outages degrade to lexical."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest
from django.db import connection
from django.test import override_settings

from memory.embeddings import search as semantic_search
from memory.embeddings.index import drain_outbox, live_generation
from memory.embeddings.model import embedding_model
from memory.models import RevisionEmbedding
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery
from memory.services import Provenance, entry_forget, revision_amend
from tests.retrieval.conftest import Workspace, revision_ids

pytestmark = pytest.mark.usefixtures("pgvector")


def drain() -> None:
    while drain_outbox():
        pass


def semantic_only(result: object) -> list[int]:
    return [i.revision_id for i in result.items if "semantic" in i.arms]  # type: ignore[attr-defined]


def test_a_paraphrase_is_found_by_the_semantic_arm(ws: Workspace) -> None:
    """'keep it brief' shares no word with the memory, yet recalls it."""
    concise = ws.remember(
        "Prefers concise prose-first writing.",
        said_in=ws.alice_dm,
        by=ws.alice,
        about=ws.alice,
        belief_type="preference",
    )
    ws.remember("Favorite food is ramen.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    drain()

    result = ws.ask(ws.alice_dm, ws.alice, "keep it brief")

    assert revision_ids(result) == [concise.pk]
    # No word matched: the meaning of the memory and of the message it was learned from found it.
    assert result.items[0].arms == ["semantic", "source"] and result.degradation == ""


def test_an_amended_memorys_old_vector_never_surfaces_old_or_new_text(ws: Workspace) -> None:
    old = ws.remember("Prefers long, detailed written reports.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    drain()
    new = revision_amend(
        agent=ws.agent,
        entry_id=old.entry_id,
        expected_revision_id=old.pk,
        provenance=Provenance(source_message_id=ws.say(ws.alice_dm, ws.alice, "bullets please").pk),
        body="Wants bullet-point summaries only.",
    ).revision  # not drained: the only vector of this entry is the old revision's

    result = ws.ask(ws.alice_dm, ws.alice, "lengthy thorough write-ups")

    assert old.pk not in revision_ids(result) and new.pk not in revision_ids(result)
    assert "detailed written reports" not in result.rendered


def test_a_forgotten_memory_never_returns_at_any_similarity(ws: Workspace) -> None:
    gone = ws.remember(
        "Keeps the spare house key under the blue flowerpot.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice
    )
    drain()
    entry_forget(agent=ws.agent, entry_id=gone.entry_id)

    result = ws.ask(ws.alice_dm, ws.alice, "Keeps the spare house key under the blue flowerpot.")

    assert gone.pk not in revision_ids(result)


def test_a_private_memory_is_not_a_semantic_candidate_for_another_audience(ws: Workspace) -> None:
    secret = ws.remember("Is quietly interviewing with a competitor.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    drain()
    for where, who in ((ws.bob_dm, ws.bob), (ws.general, ws.bob), (ws.general, ws.alice)):
        assert secret.pk not in revision_ids(ws.ask(where, who, "Is quietly interviewing with a competitor."))
    # The same text, in Alice's own DM, is a perfect semantic match: the arm was able to find it.
    assert secret.pk in semantic_only(ws.ask(ws.alice_dm, ws.alice, "Is quietly interviewing with a competitor."))


class Failing:
    name = "semantic"
    in_database = False

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        raise ConnectionError("vector store unreachable")


class Sleeping:
    name = "semantic"
    in_database = False

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        time.sleep(5)
        return []


@pytest.mark.parametrize(
    ("provider", "category"), [(Failing(), "semantic_unavailable"), (Sleeping(), "semantic_timeout")]
)
def test_an_outage_degrades_to_authorized_lexical_results_with_the_category_recorded(
    ws: Workspace, provider: object, category: str
) -> None:
    from memory.models import RetrievalEvent
    from memory.retrieval.eligibility import perspective_for_conversation
    from memory.retrieval.query import form_query
    from memory.retrieval.service import recall, task_budget

    public = ws.remember("The Q3 roadmap review is on Thursday.", said_in=ws.general, by=ws.bob)
    private = ws.remember("The Q3 roadmap review makes Alice nervous.", said_in=ws.alice_dm, by=ws.alice)
    started = time.monotonic()
    result = recall(
        perspective=perspective_for_conversation(ws.general, requester_id=ws.bob.pk),
        query=form_query(message="Q3 roadmap review", requester_id=ws.bob.pk),
        budget=task_budget(),
        providers=[provider],  # type: ignore[list-item]
    )
    assert time.monotonic() - started < 4.5
    assert revision_ids(result) == [public.pk] and private.pk not in revision_ids(result)
    assert result.degradation == category
    # Ranked as if the semantic arm had not been asked: the arm that failed is not in the fusion's scale.
    lexical_only = recall(
        perspective=perspective_for_conversation(ws.general, requester_id=ws.bob.pk),
        query=form_query(message="Q3 roadmap review", requester_id=ws.bob.pk),
        budget=task_budget(),
        providers=(),
    )
    assert [(i.revision_id, i.components["match"]) for i in result.items] == [
        (i.revision_id, i.components["match"]) for i in lexical_only.items
    ]
    assert RetrievalEvent.objects.get(trace_id=result.trace_id).degradation == category


def test_with_semantic_search_off_recall_is_lexical_and_says_so(ws: Workspace) -> None:
    fact = ws.remember("The Q3 roadmap review is on Thursday.", said_in=ws.general, by=ws.bob)
    drain()
    with override_settings(ENGRAM_SEMANTIC="off"):
        result = ws.ask(ws.general, ws.alice, "roadmap review")
    assert revision_ids(result) == [fact.pk] and result.degradation == "semantic_off"


@pytest.mark.parametrize("path", ["exact", "index"])
def test_the_semantic_arm_returns_exactly_the_nearest_eligible_memories(
    ws: Workspace, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Oracle: every eligible revision's stored vector against the query, floor applied, nearest first.
    Private memories of Alice's DM are nearer than anything eligible in #general and never returned."""
    for body in ("Is quietly interviewing with a competitor.", "Is interviewing for a new job elsewhere."):
        ws.remember(body, said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    for body in ("The team is interviewing candidates this week.", "Bob runs the hiring interviews.", "Likes ramen."):
        ws.remember(body, said_in=ws.general, by=ws.bob, about=ws.bob)
    drain()
    if path == "index":
        monkeypatch.setattr(semantic_search, "EXACT_LIMIT", 0)  # every agent is "large": HNSW, then eligibility
    generation = live_generation()
    assert generation is not None
    eligible = EligibleRevisions(perspective_for_conversation(ws.general, requester_id=ws.bob.pk))
    query = RecallQuery(text="interviewing with a competitor")

    hits = semantic_search.SemanticRevisions(generation).candidates(eligible, query, limit=10)

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT el.revision_id FROM ({eligible.sql()}) el", eligible.params())
        eligible_ids = {row[0] for row in cursor.fetchall()}
    query_vector = embedding_model().embed([query.text])[0]
    similarity = {
        e.revision_id: float(np.dot(e.vector, query_vector))
        for e in RevisionEmbedding.objects.filter(generation=generation, revision_id__in=eligible_ids)
    }
    floor = semantic_search.SIMILARITY_FLOOR
    expected = sorted((rid for rid, s in similarity.items() if s >= floor), key=lambda rid: -similarity[rid])
    assert [hit.target_id for hit in hits] == expected and len(expected) >= 2
    private = set(RevisionEmbedding.objects.values_list("revision_id", flat=True)) - eligible_ids
    assert len(private) == 2 and not private & {hit.target_id for hit in hits}
