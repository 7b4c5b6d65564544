"""``eval_locomo --embedding-cache``: a cached vector is the one the model returned for that text, new
texts go to the model and are written back, and another model's file is never read. ``--embedding-texts``
notes every text a run embedded, and ``--embedding-vectors`` answers with another model's vectors for
exactly those texts, never with some other vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management.base import CommandError

from bench.embedding_cache import CachedEmbeddings, cached_embeddings, outside_vectors, recorded_texts, text_key
from memory.embeddings import model as embedding_models


class CountingModel:
    name = "counting-model"
    dims = 2

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.embedded.extend(texts)
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


@pytest.fixture
def counting_model(monkeypatch: pytest.MonkeyPatch) -> CountingModel:
    """The process's configured model, for the block helpers that look it up."""
    model = CountingModel()
    monkeypatch.setattr(embedding_models, "embedding_model", lambda name=None: model)
    return model


def test_a_cached_text_is_not_embedded_again_and_gets_the_same_vector() -> None:
    model = CountingModel()
    cache = CachedEmbeddings(model, {})
    first = cache.embed(["kayak", "canoe", "kayak"])
    again = cache.embed(["canoe", "raft"])
    assert model.embedded == ["kayak", "canoe", "raft"]
    assert first.tolist() == [[5.0, 1.0], [5.0, 1.0], [5.0, 1.0]]
    assert again.tolist() == model.embed(["canoe", "raft"]).tolist()
    assert (cache.hits, cache.misses) == (2, 3)


def test_the_cache_file_is_written_back_and_read_for_the_same_model_only(
    tmp_path: Path, counting_model: CountingModel
) -> None:
    model = counting_model
    path = tmp_path / "vectors.npz"
    with cached_embeddings(path) as cache:
        cache.embed(["kayak"])
    assert path.exists()
    with cached_embeddings(path) as cache:
        assert cache.embed(["kayak"]).tolist() == [[5.0, 1.0]]
        assert cache.hits == 1 and cache.misses == 0
    assert model.embedded == ["kayak"]
    model.name = "another-model"
    with cached_embeddings(path) as cache:
        cache.embed(["kayak"])
        assert cache.misses == 1


@pytest.mark.usefixtures("counting_model")
def test_the_texts_a_run_embedded_are_written_once_each_in_first_seen_order(tmp_path: Path) -> None:
    path = tmp_path / "texts.json"
    with recorded_texts(path) as recorder:
        assert recorder.embed(["kayak", "canoe"]).tolist() == [[5.0, 1.0], [5.0, 1.0]]
        recorder.embed(["raft", "kayak"])
    assert json.loads(path.read_text()) == ["kayak", "canoe", "raft"]


def _outside_file(path: Path, vectors: dict[str, list[float]]) -> None:
    np.savez(
        path,
        model=np.array("outside-model"),
        keys=np.array([text_key(text) for text in vectors]),
        vectors=np.array(list(vectors.values()), dtype=np.float32),
    )


def test_outside_vectors_answer_under_the_configured_name_and_the_model_is_not_asked(
    tmp_path: Path, counting_model: CountingModel
) -> None:
    model = counting_model
    path = tmp_path / "outside.npz"
    _outside_file(path, {"kayak": [0.0, 1.0, 0.0], "canoe": [1.0, 0.0, 0.0]})
    with outside_vectors(path) as outside:
        assert (outside.name, outside.source_model, outside.dims) == ("counting-model", "outside-model", 3)
        assert outside.embed(["canoe", "kayak"]).tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert model.embedded == []


def test_a_text_without_an_outside_vector_gets_none_and_fails_the_run(
    tmp_path: Path, counting_model: CountingModel
) -> None:
    """The product degrades where a model fails, so the miss is raised again when the run ends."""
    model = counting_model
    path = tmp_path / "outside.npz"
    _outside_file(path, {"kayak": [0.0, 1.0, 0.0]})
    with (
        pytest.raises(CommandError, match="1 text\\(s\\) the run embedded have no vector"),
        outside_vectors(path) as outside,
        pytest.raises(embedding_models.ModelUnavailable, match="no vector from outside-model"),
    ):
        outside.embed(["kayak", "raft"])
    assert model.embedded == []
