"""Semantic candidate providers over pgvector, for memory recall and history search.

Both search *inside* the eligible set: the exact path joins the eligibility subquery to the vectors
(cosine distance over at most ``EXACT_LIMIT`` eligible rows); above that, the HNSW index proposes
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
    #: Size the search by the agent's vectors (cheap, an index count) rather than by its eligible
    #: rows; either way the exact scan applies full eligibility to every row it returns.
    size_by_vectors = False

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
        vectors = (
            f"JOIN {table} v ON v.{key} = el.{id_column} AND v.generation_id = %(s_generation)s AND v.dims = {dims}"
        )
        if self.size_by_vectors:
            sized = (
                f"WITH el AS NOT MATERIALIZED ({eligible_sql}), size AS (SELECT count(*) AS n FROM (SELECT 1"
                f" FROM {table} s WHERE s.generation_id = %(s_generation)s AND s.agent_id = %(el_agent)s"
                f" LIMIT {EXACT_LIMIT + 1}) s)"
            )
        else:
            sized = (
                f"WITH el AS MATERIALIZED (SELECT el.{id_column} FROM ({eligible_sql}) el LIMIT {EXACT_LIMIT + 1}),"
                " size AS (SELECT count(*) AS n FROM el)"
            )
        with connection.cursor() as cursor:
            # One statement: the size decides between the exact scan and, when it is larger than
            # EXACT_LIMIT, a single NULL row that sends the search to the HNSW path.
            cursor.execute(
                f"{sized} (SELECT el.{id_column}, {distance} AS d FROM el {vectors}"
                f" WHERE (SELECT n FROM size) <= {EXACT_LIMIT} AND {distance} <= %(s_floor)s"
                f" ORDER BY d, el.{id_column} LIMIT %(s_limit)s)"
                f" UNION ALL SELECT NULL, NULL WHERE (SELECT n FROM size) > {EXACT_LIMIT}",
                params,
            )
            rows = cursor.fetchall()
            if rows and rows[0][0] is None:
                cursor.execute(f"SET LOCAL hnsw.ef_search = {HNSW_EF_SEARCH}")
                cursor.execute(
                    f"WITH near AS (SELECT v.{key} AS target, {distance} AS d FROM {table} v"
                    f" WHERE v.generation_id = %(s_generation)s AND v.dims = {dims} AND v.agent_id = %(el_agent)s"
                    f" ORDER BY {distance} LIMIT {HNSW_CANDIDATES})"
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
    # Message eligibility walks each agent reply's lineage: counting up to EXACT_LIMIT eligible
    # messages to choose a path would cost more than either path.
    size_by_vectors = True

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
