"""Semantic candidate providers over pgvector, for memory recall and history search.

Both return only eligible rows. Where the agent has at most ``EXACT_LIMIT`` vectors (and so at most
that many eligible rows with vectors), the search is exact: every one of those vectors is compared,
and the nearest that pass the eligibility subquery are returned. Above that, the HNSW index proposes
nearest neighbours with a raised ``ef_search`` and eligibility is applied to them again. Either way
every id is revalidated once more when candidates are hydrated. A similarity floor keeps "nearest"
from meaning "relevant": below it a text is not a semantic match at all.

The distances are pgvector's :class:`~pgvector.django.CosineDistance` over the stored vector typed to
the generation's size (:func:`memory.models.typed_vector`, the expression the HNSW indexes are
declared on), compiled by the ORM from a queryset of the agent's vectors (:func:`agent_vectors_sql`). The statement
around that queryset (a materialized scan counted against ``EXACT_LIMIT``, eligibility probed row by
row in distance order) is SQL the ORM cannot express, and the eligibility it probes is
:mod:`memory.retrieval.eligibility`'s SQL with named parameters, so the queryset's values are named
placeholders too and the compiled text is embedded as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, Field, IntegerField
from django.db.models.expressions import RawSQL
from pgvector import Vector
from pgvector.django import CosineDistance, VectorField

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


#: The query vectors computed within one read (:func:`shared_query_vectors`), by model and text.
_query_vectors: ContextVar[dict[tuple[str, str], list[float]] | None] = ContextVar("query_vectors", default=None)


@contextmanager
def shared_query_vectors() -> Iterator[None]:
    """Within the block, a text is embedded once however many arms read its vector: memory recall's
    semantic arm and its source arm (the source messages' meaning), for the same question. The vectors are
    forgotten when the block ends, with the read; a block inside another shares the outer one's."""
    if _query_vectors.get() is not None:
        yield
        return
    token = _query_vectors.set({})
    try:
        yield
    finally:
        _query_vectors.reset(token)


def _param(name: str, field: Field[Any, Any]) -> RawSQL:
    """A named placeholder inside a queryset, so that its compiled SQL joins the eligibility SQL's
    named parameters (psycopg takes one placeholder style per statement)."""
    return RawSQL(f"%({name})s", (), output_field=field)


@functools.cache
def agent_vectors_sql(
    table: type[RevisionEmbedding] | type[MessageEmbedding], key: str, dims: int, *, limit: int, nearest_first: bool
) -> str:
    """``(target id, cosine distance)`` of the agent's vectors in one generation, at most ``limit``:
    pgvector's ``CosineDistance`` over :func:`memory.models.typed_vector`, the expression the HNSW
    index is declared on. Parameters ``s_generation``, ``s_dims``, ``s_agent`` and ``s_query``.

    Compiled by the ORM once per shape and kept (as ``index.LIVE_GENERATION_SQL`` is): every recall
    and history search runs it, and compiling the queryset each time cost more than the statement's
    own planning."""
    vectors = (
        table.objects.filter(
            generation_id=_param("s_generation", BigIntegerField()),
            dims=_param("s_dims", IntegerField()),
            agent_id=_param("s_agent", BigIntegerField()),
        )
        # The index path orders by the expression the HNSW index is declared on; the exact scan reads
        # every row of one size anyway, and casting each of them to the sized type would only cost.
        .annotate(d=CosineDistance(typed_vector(dims) if nearest_first else "vector", _param("s_query", VectorField())))
        .values_list(key, "d")
    )
    if nearest_first:
        vectors = vectors.order_by("d")
    sql, params = vectors[:limit].query.sql_with_params()
    assert not params, "every value is a named parameter"
    return sql


class _Semantic:
    name = "semantic"
    in_database = True
    floor = SIMILARITY_FLOOR
    table: type[RevisionEmbedding] | type[MessageEmbedding]
    key: str

    def __init__(self, generation: EmbeddingGeneration) -> None:
        self.generation = generation

    def query_vector(self, text: str) -> list[float]:
        shared = _query_vectors.get()
        key = (self.generation.model_name, text)
        if shared is not None and key in shared:
            return shared[key]
        # pgvector writes each component with str(float): rounded to seven decimals (well inside the
        # model's own precision) a query vector is sent as about 4 kB of text instead of 7.6 kB.
        vector = [round(v, 7) for v in embedding_model(self.generation.model_name).embed([text])[0].tolist()]
        if shared is not None:
            shared[key] = vector
        return vector

    def _params(self, params: dict[str, Any], *, agent_id: int, query: Sequence[float], limit: int) -> dict[str, Any]:
        return {
            **params,
            "s_generation": self.generation.pk,
            "s_dims": int(self.generation.dims),
            "s_agent": agent_id,
            "s_query": Vector(list(query)).to_text(),
            "s_limit": limit,
            "s_floor": 1 - self.floor,
        }

    def exact_statement(
        self, *, eligible_sql: str, params: dict[str, Any], agent_id: int, query: Sequence[float], limit: int
    ) -> tuple[str, dict[str, Any]]:
        """The exact search, or a single NULL row for an agent above ``EXACT_LIMIT``."""
        scan = agent_vectors_sql(
            self.table, self.key, int(self.generation.dims), limit=EXACT_LIMIT + 1, nearest_first=False
        )
        # One statement. One pass over the agent's vectors (at most EXACT_LIMIT + 1 of them)
        # computes every distance; those within the floor are taken nearest first and each is
        # judged by one probe of the eligibility subquery (a scalar subquery: the planner cannot
        # turn it into a join that evaluates eligibility for every row the agent has), until
        # ``limit`` pass. The result is exactly the nearest eligible rows. An agent with more
        # vectors than EXACT_LIMIT gets a single NULL row, which sends the search to HNSW.
        id_column = self.key
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
        return sql, self._params(params, agent_id=agent_id, query=query, limit=limit)

    def index_statement(
        self, *, eligible_sql: str, params: dict[str, Any], agent_id: int, query: Sequence[float], limit: int
    ) -> tuple[str, dict[str, Any]]:
        """The search of a large agent: the HNSW index's nearest ``HNSW_CANDIDATES`` (ordered by the
        distance the index was declared for), then eligibility applied to them again, and the floor."""
        nearest = agent_vectors_sql(
            self.table, self.key, int(self.generation.dims), limit=HNSW_CANDIDATES, nearest_first=True
        )
        id_column = self.key
        sql = (
            f"WITH near (target, d) AS ({nearest})"
            f" SELECT near.target, near.d FROM near JOIN ({eligible_sql}) el ON el.{id_column} = near.target"
            " WHERE near.d <= %(s_floor)s ORDER BY near.d, near.target LIMIT %(s_limit)s"
        )
        return sql, self._params(params, agent_id=agent_id, query=query, limit=limit)

    def indexed_sql(self, target: str) -> str:
        """True when this generation holds a vector for the text whose id is ``target``: a text written
        a moment ago, which the worker has not embedded, cannot be ranked by this arm at all (one probe
        of the vectors' unique index)."""
        return (
            f"EXISTS (SELECT 1 FROM {self.table._meta.db_table} v"
            f" WHERE v.{self.key} = {target} AND v.generation_id = {int(self.generation.pk)})"
        )

    def _search(
        self, *, eligible_sql: str, params: dict[str, Any], agent_id: int, query: Sequence[float], limit: int
    ) -> list[ArmHit]:
        statement: dict[str, Any] = dict(
            eligible_sql=eligible_sql, params=params, agent_id=agent_id, query=query, limit=limit
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

    table = RevisionEmbedding
    key = "revision_id"

    def candidates(self, eligible: EligibleRevisions, query: RecallQuery, limit: int) -> Sequence[ArmHit]:
        return self._search(
            eligible_sql=eligible.sql(),
            params=eligible.params(),
            agent_id=eligible.perspective.agent_id,
            query=self.query_vector(query.text),
            limit=limit,
        )


class SemanticMessages(_Semantic):
    """History search's semantic arm."""

    floor = MESSAGE_SIMILARITY_FLOOR
    table = MessageEmbedding
    key = "message_id"

    def message_candidates(self, eligible: EligibleMessages, text: str, limit: int) -> Sequence[ArmHit]:
        return self._search(
            eligible_sql=eligible.sql(),
            params=eligible.params(),
            agent_id=eligible.perspective.agent_id,
            query=self.query_vector(text),
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
