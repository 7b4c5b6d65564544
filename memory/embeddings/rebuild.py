"""Building a new generation (a new model, or a fresh index) while retrieval keeps using the live one.

The new generation is ``building`` while it backfills every revision and message in id order (new
text is fed to it by the outbox drain meanwhile); when the backfill completes it becomes the live
generation and the previous ones retire. Resumable: vectors already present are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.db import models, transaction
from django.db.models import QuerySet
from django.utils import timezone

from history.models import Message
from memory.embeddings.index import _embed_messages, _embed_revisions
from memory.embeddings.model import embedding_model
from memory.models import EmbeddingGeneration, EmbeddingState, MemoryRevision

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class RebuildProgress:
    done: int
    total: int


def generation_start(*, model_name: str | None = None) -> EmbeddingGeneration:
    """Open (or resume) the building generation for ``model_name``."""
    model = embedding_model(model_name)
    building = EmbeddingGeneration.objects.filter(model_name=model.name, state=EmbeddingState.BUILDING).first()
    return building or EmbeddingGeneration.objects.create(
        model_name=model.name, dims=model.dims, state=EmbeddingState.BUILDING
    )


def _batches(queryset: QuerySet[M], size: int) -> Iterator[list[M]]:
    last_id = 0
    while batch := list(queryset.filter(pk__gt=last_id).order_by("pk").only("id", "agent_id", "body")[:size]):
        yield batch
        last_id = batch[-1].pk


def generation_backfill(generation: EmbeddingGeneration, *, batch_size: int | None = None) -> Iterator[RebuildProgress]:
    size = batch_size or settings.ENGRAM_EMBEDDING_BATCH
    total = MemoryRevision.objects.count() + Message.objects.count()
    done = 0
    for revisions in _batches(MemoryRevision.objects.all(), size):
        with transaction.atomic():
            _embed_revisions(generation, revisions)
        done += len(revisions)
        yield RebuildProgress(done=done, total=total)
    for messages in _batches(Message.objects.all(), size):
        with transaction.atomic():
            _embed_messages(generation, messages)
        done += len(messages)
        yield RebuildProgress(done=done, total=total)


@transaction.atomic
def generation_complete(generation: EmbeddingGeneration) -> EmbeddingGeneration:
    """Make ``generation`` live and retire every other one."""
    now = timezone.now()
    EmbeddingGeneration.objects.exclude(pk=generation.pk).exclude(state=EmbeddingState.RETIRED).update(
        state=EmbeddingState.RETIRED
    )
    generation.state = EmbeddingState.COMPLETE
    generation.completed_at = now
    generation.save(update_fields=["state", "completed_at"])
    return generation


def rebuild(
    *, model_name: str | None = None, on_progress: Callable[[RebuildProgress], None] | None = None
) -> EmbeddingGeneration:
    generation = generation_start(model_name=model_name)
    for progress in generation_backfill(generation):
        if on_progress is not None:
            on_progress(progress)
    return generation_complete(generation)
