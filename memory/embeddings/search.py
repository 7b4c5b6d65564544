"""Semantic candidate providers over pgvector, for memory recall and history search.

Both return only eligible rows. Where the agent has at most ``EXACT_LIMIT`` vectors (and so at most
that many eligible rows with vectors), the search is exact: every one of those vectors is compared,
and the nearest that pass the eligibility subquery are returned. Above that, the HNSW index proposes
nearest neighbours with a raised ``ef_search`` and eligibility is applied to them again. Either way
every id is revalidated once more when candidates are hydrated. A similarity floor keeps "nearest"
from meaning "relevant": below it a text is not a semantic match at all.

Vectors are stored as ``real[]``; ``vector::vector(dims)`` is the cast pgvector indexes and compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from memory.embeddings.index import live_generation, semantic_enabled
from memory.embeddings.model import embedding_model
from memory.models import EmbeddingGeneration
from memory.retrieval.eligibility import EligibleMessages, EligibleRevisions
from memory.retrieval.providers import ArmHit
from memory.retrieval.query import RecallQuery

EXACT_LIMIT = 10_000
HNSW_EF_SEARCH = 400
HNSW_CANDIDATES = 400
#: Cosine similarity below which a text is not a semantic match (MiniLM: unrelated sentences sit
#: near 0.0-0.2, paraphrases well above 0.3).
SIMILARITY_FLOOR = 0.30
#: The floor for conversation messages: short chat turns ("we went last week!") sit lower against a
#: question than whole statements do, and history search fuses arms by rank, so a lower floor only
#: widens the candidates that ranking (authors, exchange context) can reorder.
MESSAGE_SIMILARITY_FLOOR = 0.15


def _vector_literal(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{v:.7f}" for v in values) + "]"


class _Semantic:
    name = "semantic"
    in_database = True
    floor = SIMILARITY_FLOOR

    def __init__(self, generation: EmbeddingGeneration) -> None:
        self.generation = generation

    def _query_vector(self, text: str) -> str:
        return _vector_literal(embedding_model(self.generation.model_name).embed([text])[0].tolist())

    def _search(
        self, *, eligible_sql: str, params: dict[str, Any], table: str, key: str, id_column: str, limit: int
    ) -> list[ArmHit]:
        dims = int(self.generation.dims)
        distance = f"(v.vector::vector({dims}) <=> %(s_query)s::vector({dims}))"
        params = {**params, "s_generation": self.generation.pk, "s_limit": limit, "s_floor": 1 - self.floor}
        agent_vectors = f"v.generation_id = %(s_generation)s AND v.dims = {dims} AND v.agent_id = %(el_agent)s"
        with connection.cursor() as cursor:
            # One statement. Up to EXACT_LIMIT vectors for the agent: the distance of every one of
            # them, then eligibility for those within the floor, nearest first, until ``limit`` pass
            # (each candidate is one probe of the eligibility subquery, instead of evaluating it for
            # every revision or message the agent has). The result is exactly the nearest eligible
            # rows. Above EXACT_LIMIT, a single NULL row sends the search to the HNSW path.
            cursor.execute(
                f"WITH size AS (SELECT count(*) AS n FROM (SELECT 1 FROM {table} v WHERE {agent_vectors}"
                f" LIMIT {EXACT_LIMIT + 1}) s),"
                f" near AS MATERIALIZED (SELECT v.{key} AS target, {distance} AS d FROM {table} v"
                f" WHERE (SELECT n FROM size) <= {EXACT_LIMIT} AND {agent_vectors} AND {distance} <= %(s_floor)s)"
                " (SELECT near.target, near.d FROM near"
                f" WHERE EXISTS (SELECT 1 FROM ({eligible_sql}) el WHERE el.{id_column} = near.target)"
                " ORDER BY near.d, near.target LIMIT %(s_limit)s)"
                f" UNION ALL SELECT NULL, NULL WHERE (SELECT n FROM size) > {EXACT_LIMIT}",
                params,
            )
            rows = cursor.fetchall()
            if rows and rows[0][0] is None:
                cursor.execute(f"SET LOCAL hnsw.ef_search = {HNSW_EF_SEARCH}")
                cursor.execute(
                    f"WITH near AS (SELECT v.{key} AS target, {distance} AS d FROM {table} v"
                    f" WHERE {agent_vectors} ORDER BY {distance} LIMIT {HNSW_CANDIDATES})"
                    f" SELECT near.target, near.d FROM near JOIN ({eligible_sql}) el ON el.{id_column} = near.target"
                    " WHERE near.d <= %(s_floor)s ORDER BY near.d, near.target LIMIT %(s_limit)s",
                    params,
                )
                rows = cursor.fetchall()
        return [
            ArmHit(self.name, int(target), rank, round(1 - float(d), 6)) for rank, (target, d) in enumerate(rows, 1)
        ]


class SemanticRevisions(_Semantic):
    """Memory recall's semantic arm."""

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        params = {**eligible.params(), "s_query": self._query_vector(query.text)}
        return self._search(
            eligible_sql=eligible.sql(),
            params=params,
            table="memory_revisionembedding",
            key="revision_id",
            id_column="revision_id",
            limit=limit,
        )


class SemanticMessages(_Semantic):
    """History search's semantic arm."""

    floor = MESSAGE_SIMILARITY_FLOOR

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
        params = {**eligible.params(), "s_query": self._query_vector(text)}
        return self._search(
            eligible_sql=eligible.sql(),
            params=params,
            table="memory_messageembedding",
            key="message_id",
            id_column="message_id",
            limit=limit,
        )


def semantic_providers() -> tuple[list[SemanticRevisions], list[SemanticMessages], str]:
    """The configured semantic arms, or none and the degradation category that says why."""
    if not semantic_enabled():
        return [], [], "semantic_off"
    generation = live_generation()
    if generation is None:
        return [], [], "semantic_rebuilding"
    return [SemanticRevisions(generation)], [SemanticMessages(generation)], ""
