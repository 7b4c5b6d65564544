"""A new generation is built beside the live one and replaces it only when complete."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from memory.embeddings.index import drain_outbox, live_generation
from memory.embeddings.rebuild import generation_backfill, generation_complete, generation_start
from memory.models import EmbeddingGeneration, EmbeddingState, MessageEmbedding, RevisionEmbedding
from tests.retrieval.conftest import Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("pgvector")]


def test_retrieval_keeps_the_live_generation_until_the_new_one_is_complete(ws: Workspace) -> None:
    ws.remember("Prefers concise prose-first writing.", said_in=ws.alice_dm, by=ws.alice, about=ws.alice)
    while drain_outbox():
        pass
    live = live_generation()
    assert live is not None

    building = generation_start()
    steps = list(generation_backfill(building, batch_size=1))
    assert live_generation() == live  # still the old one while building
    assert (
        steps[-1].done
        == steps[-1].total
        == RevisionEmbedding.objects.filter(generation=live).count()
        + (MessageEmbedding.objects.filter(generation=live).count())
    )

    generation_complete(building)

    assert live_generation() == building
    assert EmbeddingGeneration.objects.get(pk=live.pk).state == EmbeddingState.RETIRED
    assert RevisionEmbedding.objects.filter(generation=building).count() == 1


def test_the_command_reports_status_and_rebuilds(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    ws.remember("Likes green tea.", said_in=ws.alice_dm, by=ws.alice)
    call_command("embeddings", "drain")
    call_command("embeddings", "rebuild")
    call_command("embeddings", "status")
    out = capsys.readouterr().out
    assert "is live" in out and "pending: 0" in out
    assert EmbeddingGeneration.objects.filter(state=EmbeddingState.COMPLETE).count() == 1
