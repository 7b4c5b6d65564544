"""Keeping the vector index in step with the text: generations and the outbox drain.

Every immutable text insert writes an ``IndexOutbox`` row in its own transaction (a trigger), the
services ask Celery to drain after commit, and a periodic task drains whatever a broker lost. The
drain is idempotent: each (text, generation) pair has at most one vector (a unique key, inserted with
ON CONFLICT DO NOTHING), and an outbox row is marked processed in the same transaction as its
vectors, so a worker killed mid-batch leaves the batch pending for the next one.

A generation is one model's index. The live one (newest complete) serves retrieval; a new model is
built as a ``building`` generation by ``manage.py embeddings rebuild`` while retrieval keeps using
the live one, and the drain feeds both.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config.rows import fetch_all, select_list
from history.models import Message
from memory.embeddings.model import embedding_model
from memory.models import (
    EmbeddingGeneration,
    EmbeddingState,
    IndexOutbox,
    MemoryRevision,
    MessageEmbedding,
    OutboxTarget,
    RevisionEmbedding,
)

log = logging.getLogger(__name__)


@functools.cache
def vectors_stored() -> bool:
    """Whether this database has the embedding tables: created by ``memory/0003`` exactly where the
    server had pgvector. Without them nothing is embedded, nothing reads them, and retrieval is
    lexical-only. Asked once per process (a migration is what changes it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [RevisionEmbedding._meta.db_table])
        row = cursor.fetchone()
        return bool(row and row[0])


def semantic_enabled() -> bool:
    return settings.ENGRAM_SEMANTIC != "off" and vectors_stored()


#: The newest complete generation. Fixed text: every recall and history search reads it, and the ORM
#: would spend more than the round trip compiling the equivalent query each time.
LIVE_GENERATION_SQL = (
    f"SELECT {select_list(EmbeddingGeneration, 'g')} FROM {EmbeddingGeneration._meta.db_table} g"
    " WHERE g.state = %s ORDER BY g.completed_at DESC, g.id DESC LIMIT 1"
)


def live_generation() -> EmbeddingGeneration | None:
    return next(iter(fetch_all(EmbeddingGeneration, LIVE_GENERATION_SQL, [EmbeddingState.COMPLETE])), None)


def ensure_generation() -> EmbeddingGeneration:
    """The generation new text is indexed into on a fresh install: the configured model's, live from
    the start (it fills as text arrives; missing vectors only mean fewer semantic candidates)."""
    with transaction.atomic():
        existing = EmbeddingGeneration.objects.exclude(state=EmbeddingState.RETIRED).order_by("id").first()
        if existing is not None:
            return existing
        model = embedding_model()
        return EmbeddingGeneration.objects.create(
            model_name=model.name, dims=model.dims, state=EmbeddingState.COMPLETE, completed_at=timezone.now()
        )


def target_generations() -> list[EmbeddingGeneration]:
    return list(EmbeddingGeneration.objects.exclude(state=EmbeddingState.RETIRED).order_by("id"))


def drain_outbox(*, batch_size: int | None = None) -> int:
    """Embed one batch of pending outbox rows into every non-retired generation. Returns rows taken.

    Without the embedding tables (lexical-only) there is nothing to derive: the batch is marked
    processed unembedded, and a server that gains pgvector fills its first generation with
    ``manage.py embeddings rebuild``."""
    size = batch_size or settings.ENGRAM_EMBEDDING_BATCH
    stored = vectors_stored()
    if stored:
        ensure_generation()
    generations = target_generations() if stored else []
    with transaction.atomic():
        rows = list(
            IndexOutbox.objects.select_for_update(skip_locked=True)
            .filter(processed_at__isnull=True)
            .order_by("id")[:size]
        )
        if not rows:
            return 0
        if generations:
            _embed_batch(generations, rows)
        IndexOutbox.objects.filter(pk__in=[r.pk for r in rows]).update(processed_at=timezone.now())
    return len(rows)


def _embed_batch(generations: Sequence[EmbeddingGeneration], rows: Sequence[IndexOutbox]) -> None:
    revision_ids = [r.target_id for r in rows if r.target == OutboxTarget.REVISION]
    message_ids = [r.target_id for r in rows if r.target == OutboxTarget.MESSAGE]
    revisions = list(MemoryRevision.objects.filter(pk__in=revision_ids).only("id", "agent_id", "body"))
    messages = list(Message.objects.filter(pk__in=message_ids).only("id", "agent_id", "body"))
    for generation in generations:
        _embed_revisions(generation, revisions)
        _embed_messages(generation, messages)


def _embed_rows(
    generation: EmbeddingGeneration,
    rows: Sequence[MemoryRevision] | Sequence[Message],
    table: type[RevisionEmbedding] | type[MessageEmbedding],
    key: str,
) -> None:
    """Vectors for the rows that ``generation`` does not have yet; a concurrent writer's row wins."""
    done = set(table.objects.filter(generation=generation, **{f"{key}__in": rows}).values_list(f"{key}_id", flat=True))
    todo = [row for row in rows if row.pk not in done]
    if not todo:
        return
    vectors = embedding_model(generation.model_name).embed([row.body for row in todo])
    new: list[Any] = [
        table(
            **{key: row},
            agent_id=row.agent_id,
            generation=generation,
            model_name=generation.model_name,
            dims=generation.dims,
            vector=vector.tolist(),
        )
        for row, vector in zip(todo, vectors, strict=True)
    ]
    table.objects.bulk_create(new, ignore_conflicts=True)


def _embed_revisions(generation: EmbeddingGeneration, revisions: Sequence[MemoryRevision]) -> None:
    _embed_rows(generation, revisions, RevisionEmbedding, "revision")


def _embed_messages(generation: EmbeddingGeneration, messages: Sequence[Message]) -> None:
    _embed_rows(generation, messages, MessageEmbedding, "message")


def record_failure(error: BaseException) -> None:
    """Count a failed attempt on the oldest pending rows, so operators can see a stuck queue."""
    with transaction.atomic():
        pending = list(
            IndexOutbox.objects.select_for_update(skip_locked=True)
            .filter(processed_at__isnull=True)
            .order_by("id")
            .values_list("pk", flat=True)[: settings.ENGRAM_EMBEDDING_BATCH]
        )
        for row in IndexOutbox.objects.filter(pk__in=pending):
            row.attempts += 1
            row.last_error = f"{type(error).__name__}: {error}"[:2000]
            row.save(update_fields=["attempts", "last_error"])


def pending_count() -> int:
    return IndexOutbox.objects.filter(processed_at__isnull=True).count()
