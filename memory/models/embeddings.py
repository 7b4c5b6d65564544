"""The derived, disposable semantic indexes: embedding generations, the vectors of revisions and
messages, and the outbox of index work written with the text it derives from.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import OpClass
from django.db import models
from django.db.models import Func, Q
from django.db.models.functions import Cast
from pgvector.django import HnswIndex, VectorField

from history.models import Message
from memory.models.base import choices_constraint
from memory.models.entries import MemoryRevision


class EmbeddingState(models.TextChoices):
    BUILDING = "building", "Building"
    COMPLETE = "complete", "Complete"
    RETIRED = "retired", "Retired"


class EmbeddingGeneration(models.Model):
    """One model's index over all texts. Retrieval uses the newest complete generation only."""

    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=EmbeddingState.choices, default=EmbeddingState.BUILDING)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [choices_constraint("generation_state_valid", "state", EmbeddingState)]


#: The dimensions the semantic indexes are built for: the default model's (MiniLM, 384). A generation
#: of another size is stored and searched exactly, but no index serves its large agents.
INDEXED_DIMS = 384


def typed_vector(dims: int) -> Cast:
    """The stored vector as pgvector's ``vector(dims)``: the expression the HNSW indexes are built on
    and every search orders by (the column has no fixed size, since generations differ, and an HNSW
    index needs one)."""
    return Cast("vector", output_field=VectorField(dimensions=dims))


def vector_dims_match() -> Q:
    """A row's ``dims`` is its vector's length (pgvector's ``vector_dims``)."""
    return Q(dims=Func("vector", function="vector_dims", output_field=models.IntegerField()))


def cosine_hnsw(name: str) -> HnswIndex:
    """The cosine HNSW index of one embedding table, over the rows of ``INDEXED_DIMS`` dimensions."""
    return HnswIndex(
        OpClass(typed_vector(INDEXED_DIMS), name="vector_cosine_ops"),
        name=name,
        condition=Q(dims=INDEXED_DIMS),
        m=16,
        ef_construction=64,
    )


class RevisionEmbedding(models.Model):
    """A derived, disposable vector of one immutable revision's text.

    The embedding tables exist only on a server with pgvector (``memory/0003``): read and write them
    only where :func:`memory.embeddings.index.vectors_stored` says so. Their keys cascade in the
    database (declared there, ``DO_NOTHING`` here), so deleting a revision, message or generation
    never makes Django's collector read a table that may not exist.
    """

    revision = models.ForeignKey(
        MemoryRevision, on_delete=models.DO_NOTHING, db_constraint=False, related_name="embeddings"
    )
    agent_id = models.BigIntegerField()
    generation = models.ForeignKey(
        EmbeddingGeneration, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["revision", "generation"], name="revision_embedding_unique"),
            models.CheckConstraint(condition=vector_dims_match(), name="revision_embedding_dims"),
        ]
        indexes = [
            models.Index(fields=["generation", "agent_id"], name="revision_embedding_agent"),
            cosine_hnsw("revision_embedding_hnsw_384"),
        ]


class MessageEmbedding(models.Model):
    """A derived, disposable vector of one immutable message's text (stored as :class:`RevisionEmbedding`)."""

    message = models.ForeignKey(Message, on_delete=models.DO_NOTHING, db_constraint=False, related_name="embeddings")
    agent_id = models.BigIntegerField()
    generation = models.ForeignKey(
        EmbeddingGeneration, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    model_name = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "generation"], name="message_embedding_unique"),
            models.CheckConstraint(condition=vector_dims_match(), name="message_embedding_dims"),
        ]
        indexes = [
            models.Index(fields=["generation", "agent_id"], name="message_embedding_agent"),
            cosine_hnsw("message_embedding_hnsw_384"),
        ]


class OutboxTarget(models.TextChoices):
    REVISION = "revision", "Memory revision"
    MESSAGE = "message", "Message"


class IndexOutbox(models.Model):
    """Pending derived-index work, written in the same transaction as the text it derives from."""

    target = models.CharField(max_length=16, choices=OutboxTarget.choices)
    target_id = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        verbose_name = "index outbox entry"
        verbose_name_plural = "index outbox entries"
        constraints = [choices_constraint("outbox_target_valid", "target", OutboxTarget)]
        indexes = [models.Index(fields=["id"], condition=Q(processed_at__isnull=True), name="outbox_pending")]
