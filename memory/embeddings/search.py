"""Semantic candidate providers over pgvector, for memory recall and history search.

Both return only eligible rows. Where the agent has at most ``EXACT_LIMIT`` vectors (and so at most
that many eligible rows with vectors), the search is exact: every one of those vectors is compared,
and the nearest that pass the eligibility subquery are returned. Above that, the HNSW index proposes
nearest neighbours with a raised ``ef_search`` and eligibility is applied to them again. Either way
every id is revalidated once more when candidates are hydrated. A similarity floor keeps "nearest"
from meaning "relevant": below it a text is not a semantic match at all.

Vectors are stored as pgvector ``vector`` (``real[]`` on a server without pgvector, where no semantic
search runs); ``vector::vector(dims)`` is the typed form the HNSW indexes are built on and compared in.
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
            # One statement. One pass over the agent's vectors (at most EXACT_LIMIT + 1 of them)
            # computes every distance; those within the floor are taken nearest first and each is
            # judged by one probe of the eligibility subquery (a scalar subquery: the planner cannot
            # turn it into a join that evaluates eligibility for every row the agent has), until
            # ``limit`` pass. The result is exactly the nearest eligible rows. An agent with more
            # vectors than EXACT_LIMIT gets a single NULL row, which sends the search to HNSW.
            cursor.execute(
                f"WITH agent AS MATERIALIZED (SELECT v.{key} AS target, {distance} AS d FROM {table} v"
                f" WHERE {agent_vectors} LIMIT {EXACT_LIMIT + 1}),"
                f" exact AS (SELECT count(*) <= {EXACT_LIMIT} AS ok FROM agent)"
                " (SELECT near.target, near.d FROM (SELECT agent.target, agent.d FROM agent"
                " WHERE (SELECT ok FROM exact) AND agent.d <= %(s_floor)s"
                " ORDER BY agent.d, agent.target OFFSET 0) near"
                f" WHERE (SELECT TRUE FROM ({eligible_sql}) el WHERE el.{id_column} = near.target LIMIT 1)"
                " LIMIT %(s_limit)s)"
                " UNION ALL SELECT NULL, NULL WHERE NOT (SELECT ok FROM exact)",
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
