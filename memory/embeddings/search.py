"""Semantic candidate providers over pgvector, for memory recall and history search.

Both return only eligible rows. Where the agent has at most ``EXACT_LIMIT`` vectors (and so at most
that many eligible rows with vectors), the search is exact: every one of those vectors is compared,
and the nearest that pass the eligibility subquery are returned. Above that, the HNSW index proposes
nearest neighbours with a raised ``ef_search`` and eligibility is applied to them again. Either way
every id is revalidated once more when candidates are hydrated. A similarity floor keeps "nearest"
from meaning "relevant": below it a text is not a semantic match at all.

The distances are pgvector's :class:`~pgvector.django.CosineDistance` over the stored vector typed to
the generation's size (:func:`memory.models.typed_vector`, the expression the HNSW indexes are
declared on), compiled by the ORM from a queryset of the agent's vectors. The statement around that
queryset (a materialized scan counted against ``EXACT_LIMIT``, eligibility probed row by row in
distance order) is SQL the ORM cannot express, and the eligibility it probes is
:mod:`memory.retrieval.eligibility`'s SQL, so the two are joined as text: :func:`_named` renames the
queryset's positional parameters to join eligibility's named ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import QuerySet
from pgvector.django import CosineDistance

from memory.embeddings.index import live_generation, semantic_enabled
from memory.embeddings.model import embedding_model
from memory.models import EmbeddingGeneration, MessageEmbedding, RevisionEmbedding, typed_vector
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


def _named(sql: str, params: Sequence[Any], prefix: str) -> tuple[str, dict[str, Any]]:
    """A compiled queryset's SQL with its positional parameters renamed ``<prefix>0``, ``<prefix>1``, …

    psycopg takes one placeholder style per statement, and the eligibility SQL a search embeds uses
    named ones. Literal percent signs (``%%``) stay doubled through the renaming."""
    names = [f"{prefix}{i}" for i in range(len(params))]
    return sql.replace("%%", "%%%%") % tuple(f"%({name})s" for name in names), dict(zip(names, params, strict=True))


class _Semantic:
    name = "semantic"
    in_database = True
    floor = SIMILARITY_FLOOR

    def __init__(self, generation: EmbeddingGeneration) -> None:
        self.generation = generation

    def _query_vector(self, text: str) -> list[float]:
        return embedding_model(self.generation.model_name).embed([text])[0].tolist()

    def agent_vectors(
        self, table: type[RevisionEmbedding] | type[MessageEmbedding], *, key: str, agent_id: int, query: list[float]
    ) -> QuerySet[Any]:
        """(target id, cosine distance to ``query``) for every vector the agent has in this generation."""
        dims = int(self.generation.dims)
        return (
            table.objects.filter(generation_id=self.generation.pk, dims=dims, agent_id=agent_id)
            .annotate(d=CosineDistance(typed_vector(dims), query))
            .values_list(key, "d")
        )

    def exact_statement(
        self, *, eligible_sql: str, params: dict[str, Any], vectors: QuerySet[Any], id_column: str, limit: int
    ) -> tuple[str, dict[str, Any]]:
        """The exact search, or a single NULL row for an agent above ``EXACT_LIMIT``."""
        scan, scan_params = _named(*vectors[: EXACT_LIMIT + 1].query.sql_with_params(), "s_scan")
        # One statement. One pass over the agent's vectors (at most EXACT_LIMIT + 1 of them)
        # computes every distance; those within the floor are taken nearest first and each is
        # judged by one probe of the eligibility subquery (a scalar subquery: the planner cannot
        # turn it into a join that evaluates eligibility for every row the agent has), until
        # ``limit`` pass. The result is exactly the nearest eligible rows. An agent with more
        # vectors than EXACT_LIMIT gets a single NULL row, which sends the search to HNSW.
        sql = (
            f"WITH agent (target, d) AS MATERIALIZED ({scan}),"
            f" exact AS (SELECT count(*) <= {EXACT_LIMIT} AS ok FROM agent)"
            " (SELECT near.target, near.d FROM (SELECT agent.target, agent.d FROM agent"
            " WHERE (SELECT ok FROM exact) AND agent.d <= %(s_floor)s"
            " ORDER BY agent.d, agent.target OFFSET 0) near"
            f" WHERE (SELECT TRUE FROM ({eligible_sql}) el WHERE el.{id_column} = near.target LIMIT 1)"
            " LIMIT %(s_limit)s)"
            " UNION ALL SELECT NULL, NULL WHERE NOT (SELECT ok FROM exact)"
        )
        return sql, {**params, **scan_params, "s_limit": limit, "s_floor": 1 - self.floor}

    def index_statement(
        self, *, eligible_sql: str, params: dict[str, Any], vectors: QuerySet[Any], id_column: str, limit: int
    ) -> tuple[str, dict[str, Any]]:
        """The search of a large agent: the HNSW index's nearest ``HNSW_CANDIDATES`` (ordered by the
        distance the index was declared for), then eligibility applied to them again, and the floor."""
        nearest, nearest_params = _named(*vectors.order_by("d")[:HNSW_CANDIDATES].query.sql_with_params(), "s_near")
        sql = (
            f"WITH near (target, d) AS ({nearest})"
            f" SELECT near.target, near.d FROM near JOIN ({eligible_sql}) el ON el.{id_column} = near.target"
            " WHERE near.d <= %(s_floor)s ORDER BY near.d, near.target LIMIT %(s_limit)s"
        )
        return sql, {**params, **nearest_params, "s_limit": limit, "s_floor": 1 - self.floor}

    def _search(
        self, *, eligible_sql: str, params: dict[str, Any], vectors: QuerySet[Any], id_column: str, limit: int
    ) -> list[ArmHit]:
        statement: dict[str, Any] = dict(
            eligible_sql=eligible_sql, params=params, vectors=vectors, id_column=id_column, limit=limit
        )
        with connection.cursor() as cursor:
            cursor.execute(*self.exact_statement(**statement))
            rows = cursor.fetchall()
            if rows and rows[0][0] is None:
                cursor.execute(f"SET LOCAL hnsw.ef_search = {HNSW_EF_SEARCH}")
                cursor.execute(*self.index_statement(**statement))
                rows = cursor.fetchall()
        return [
            ArmHit(self.name, int(target), rank, round(1 - float(d), 6)) for rank, (target, d) in enumerate(rows, 1)
        ]


class SemanticRevisions(_Semantic):
    """Memory recall's semantic arm."""

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        vectors = self.agent_vectors(
            RevisionEmbedding,
            key="revision_id",
            agent_id=eligible.perspective.agent_id,
            query=self._query_vector(query.text),
        )
        return self._search(
            eligible_sql=eligible.sql(), params=eligible.params(), vectors=vectors, id_column="revision_id", limit=limit
        )


class SemanticMessages(_Semantic):
    """History search's semantic arm."""

    floor = MESSAGE_SIMILARITY_FLOOR

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
        vectors = self.agent_vectors(
            MessageEmbedding, key="message_id", agent_id=eligible.perspective.agent_id, query=self._query_vector(text)
        )
        return self._search(
            eligible_sql=eligible.sql(), params=eligible.params(), vectors=vectors, id_column="message_id", limit=limit
        )


def semantic_providers() -> tuple[list[SemanticRevisions], list[SemanticMessages], str]:
    """The configured semantic arms, or none and the degradation category that says why."""
    if not semantic_enabled():
        return [], [], "semantic_off"
    generation = live_generation()
    if generation is None:
        return [], [], "semantic_rebuilding"
    return [SemanticRevisions(generation)], [SemanticMessages(generation)], ""
