"""A large agent's semantic search is planned on the HNSW index the models declare."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from django.db import connection

from bench.management.commands.bench_recall import Spec, ensure_corpus
from history.models import Conversation
from memory.embeddings import search as semantic_search
from memory.embeddings.index import ensure_generation
from memory.models import MemoryRevision, RevisionEmbedding
from memory.retrieval.eligibility import EligibleRevisions, perspective_for_conversation

pytestmark = pytest.mark.usefixtures("pgvector")

#: An index scan in ``EXPLAIN`` text, and the index it reads.
INDEX_SCAN = re.compile(r"Index Scan using (\w+)")


def test_above_the_exact_limit_the_search_reads_the_declared_hnsw_index() -> None:
    """An agent with EXACT_LIMIT + 1 vectors (the real limit, not a lowered one): the exact statement
    declines, and the index statement is planned on ``revision_embedding_hnsw_384`` with no planner
    setting changed; it returns the nearest eligible revision, and no ineligible one."""
    (agent,), _ = ensure_corpus(Spec(revisions=semantic_search.EXACT_LIMIT + 1, agents=1, seed=40))
    generation = ensure_generation()
    revision_ids = list(MemoryRevision.objects.filter(agent=agent).order_by("id").values_list("id", flat=True))
    rng = np.random.default_rng(40)
    vectors = rng.standard_normal((len(revision_ids), generation.dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # The declared index, built once the rows are in (as after a bulk load), not row by row: a
    # minute less of test time. It is the models' own definition either way.
    (hnsw,) = [index for index in RevisionEmbedding._meta.indexes if index.name == "revision_embedding_hnsw_384"]
    with connection.schema_editor() as editor:
        editor.remove_index(RevisionEmbedding, hnsw)
    RevisionEmbedding.objects.bulk_create(
        (
            RevisionEmbedding(
                revision_id=revision_id,
                agent_id=agent.pk,
                generation=generation,
                model_name=generation.model_name,
                dims=generation.dims,
                vector=vector,
            )
            for revision_id, vector in zip(revision_ids, vectors, strict=True)
        ),
        batch_size=1_000,
    )
    with connection.schema_editor() as editor:
        editor.add_index(RevisionEmbedding, hnsw)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_revisionembedding")
    conversation = Conversation.objects.get(agent=agent, external_thread_id="general")
    eligible = EligibleRevisions(perspective_for_conversation(conversation))
    probe = f"SELECT TRUE FROM ({eligible.sql()}) el WHERE el.revision_id = %(probe)s LIMIT 1"

    def is_eligible(revision_id: int) -> bool:
        # One probe by id, as the searches judge their candidates (listing the whole eligible set of
        # ten thousand revisions is not a question retrieval ever asks).
        with connection.cursor() as cursor:
            cursor.execute(probe, {**eligible.params(), "probe": revision_id})
            return cursor.fetchone() is not None

    first_of: dict[bool, int] = {}
    for revision_id in revision_ids:
        first_of.setdefault(is_eligible(revision_id), revision_id)
        if len(first_of) == 2:
            break
    assert set(first_of) == {True, False}, "the corpus has eligible and ineligible revisions"
    target, ineligible = first_of[True], first_of[False]
    provider = semantic_search.SemanticRevisions(generation)
    base: dict[str, Any] = {"eligible_sql": eligible.sql(), "params": eligible.params(), "limit": 10}

    def search_for(revision_id: int) -> list[int]:
        statement = {**base, "agent_id": agent.pk, "query": vectors[revision_ids.index(revision_id)].tolist()}
        with connection.cursor() as cursor:
            cursor.execute(*provider.exact_statement(**statement))
            assert cursor.fetchall() == [(None, None)]  # too many vectors for the exact scan
            sql, params = provider.index_statement(**statement)
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert INDEX_SCAN.findall(plan)[:1] == ["revision_embedding_hnsw_384"], plan
        return [hit.target_id for hit in provider._search(**statement)]

    assert search_for(target)[:1] == [target]
    assert ineligible not in search_for(ineligible)
