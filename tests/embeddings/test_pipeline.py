"""The outbox drain: every text is embedded into every live or building generation exactly once."""

from __future__ import annotations

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from history.models import EvidenceMethod
from history.services import message_ingest
from memory.embeddings.index import drain_outbox, pending_count, vectors_stored
from memory.embeddings.model import embedding_model
from memory.models import (
    EmbeddingGeneration,
    EmbeddingState,
    IndexOutbox,
    MessageEmbedding,
    OutboxTarget,
    RevisionEmbedding,
)
from memory.services import Belief, Provenance, memory_remember
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, public_channel

pytestmark = pytest.mark.django_db


def write_texts(n: int) -> None:
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent)
    person = ActorFactory.create(connector=connector)
    channel = public_channel(connector)
    for i in range(n):
        message = message_ingest(
            conversation=channel,
            actor=person,
            body=f"Fact number {i} about the rollout.",
            created_at=timezone.now(),
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        ).message
        memory_remember(
            agent=agent, belief=Belief(body=f"Rollout fact {i}."), provenance=Provenance(source_message_id=message.pk)
        )


def test_every_text_written_queues_index_work_in_its_own_transaction() -> None:
    write_texts(3)
    assert IndexOutbox.objects.filter(target=OutboxTarget.MESSAGE, processed_at__isnull=True).count() == 3
    assert IndexOutbox.objects.filter(target=OutboxTarget.REVISION, processed_at__isnull=True).count() == 3


@pytest.mark.usefixtures("pgvector")
def test_draining_embeds_every_pending_text_exactly_once_even_when_work_is_repeated() -> None:
    write_texts(5)
    while drain_outbox(batch_size=4):
        pass
    assert pending_count() == 0
    assert RevisionEmbedding.objects.count() == MessageEmbedding.objects.count() == 5

    # A crash after the vectors were written but before the queue was marked would replay the batch.
    IndexOutbox.objects.update(processed_at=None)
    while drain_outbox(batch_size=4):
        pass

    assert RevisionEmbedding.objects.count() == MessageEmbedding.objects.count() == 5
    generation = EmbeddingGeneration.objects.get()
    assert generation.state == EmbeddingState.COMPLETE and generation.dims == 384
    assert all(len(v) == 384 for v in RevisionEmbedding.objects.values_list("vector", flat=True))


@pytest.mark.usefixtures("pgvector")
def test_a_building_generation_is_fed_alongside_the_live_one() -> None:
    write_texts(2)
    drain_outbox()
    building = EmbeddingGeneration.objects.create(
        model_name="all-MiniLM-L6-v2-onnx-int8", dims=384, state=EmbeddingState.BUILDING
    )
    write_texts(1)
    drain_outbox()
    assert RevisionEmbedding.objects.filter(generation=building).count() == 1
    assert RevisionEmbedding.objects.exclude(generation=building).count() == 3


def test_with_pgvector_vectors_are_stored_as_vectors_and_read_back_as_the_floats_written(pgvector: None) -> None:
    write_texts(1)
    drain_outbox()
    stored = RevisionEmbedding.objects.get()
    with connection.cursor() as cursor:
        # Native storage: a distance reads the row as it is, with no per-row array conversion.
        cursor.execute(
            "SELECT pg_typeof(vector)::text, vector_dims(vector) FROM memory_revisionembedding WHERE id = %s",
            [stored.pk],
        )
        assert cursor.fetchone() == ("vector", 384)
        # The dimensions check follows the type: a row whose vector disagrees with its dims is refused.
        with pytest.raises(IntegrityError), transaction.atomic():
            cursor.execute("UPDATE memory_revisionembedding SET dims = 383 WHERE id = %s", [stored.pk])
    expected = embedding_model().embed([stored.revision.body])[0]
    assert len(stored.vector) == 384 and np.allclose(stored.vector, expected, atol=1e-6)


def test_without_pgvector_the_drain_clears_the_queue_and_embeds_nothing() -> None:
    """Lexical-only: no embedding tables, so nothing is derived and no work is left pending forever."""
    if vectors_stored():
        pytest.skip("the server has pgvector: the embedding tables exist")
    write_texts(3)
    while drain_outbox(batch_size=4):
        pass
    assert pending_count() == 0
    assert not EmbeddingGeneration.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('memory_revisionembedding'), to_regclass('memory_messageembedding')")
        assert cursor.fetchone() == (None, None)


def test_without_pgvector_the_rebuild_command_refuses_and_status_says_lexical_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if vectors_stored():
        pytest.skip("the server has pgvector: the embedding tables exist")
    with pytest.raises(CommandError, match="migrated without pgvector"):
        call_command("embeddings", "rebuild")
    call_command("embeddings", "status")
    assert "off (lexical only)" in capsys.readouterr().out
