"""``eval_locomo --embedding-cache``: a cached vector is the one the model returned for that text, new
texts go to the model and are written back, and another model's file is never read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.embedding_cache import CachedEmbeddings, cached_embeddings
from memory.embeddings import model as embedding_models


class CountingModel:
    name = "counting-model"
    dims = 2

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.embedded.extend(texts)
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CountingModel()
    monkeypatch.setattr(embedding_models, "embedding_model", lambda name=None: model)
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
