"""An opt-in cache of embedding vectors for repeated evaluation runs (``eval_locomo --embedding-cache``).

A hybrid or semantic evaluation embeds the whole transcript before it asks anything, and that is most
of its time; the vectors do not change between runs of the same model. The cache wraps the process's
configured model: a text seen before gets the vector the model returned for it then, any other text is
embedded by the model itself and remembered. The model embeds each text alone (see
:class:`memory.embeddings.model.MiniLMOnnx`), so a text's vector never depends on what it was embedded
beside, and a cached vector is exactly the one the model would return now. Everything else (the index
outbox, the stored vectors, the search) runs as it does without the cache.

The file is keyed by the model's name: vectors of another model are never read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from memory.embeddings import model as embedding_models


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class CachedEmbeddings:
    """The configured model behind a lookup of the vectors it has returned for each text."""

    def __init__(self, model: embedding_models.EmbeddingModel, vectors: dict[str, np.ndarray[Any, Any]]) -> None:
        self.model = model
        self.name = model.name
        self.dims = model.dims
        self.vectors = vectors
        self.hits = 0
        self.misses = 0

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        keys = [text_key(text) for text in texts]
        missing = list(dict.fromkeys(text for text, key in zip(texts, keys, strict=True) if key not in self.vectors))
        if missing:
            for text, vector in zip(missing, self.model.embed(missing), strict=True):
                self.vectors[text_key(text)] = vector
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return np.stack([self.vectors[key] for key in keys]).astype(np.float32)


def _load(path: Path, model_name: str) -> dict[str, np.ndarray[Any, Any]]:
    if not path.exists():
        return {}
    with np.load(path, allow_pickle=False) as stored:
        if str(stored["model"]) != model_name:
            return {}
        return dict(zip((str(k) for k in stored["keys"]), stored["vectors"], strict=True))


def _save(path: Path, model_name: str, vectors: dict[str, np.ndarray[Any, Any]]) -> None:
    keys = sorted(vectors)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial.npz")
    np.savez(
        partial,
        model=np.array(model_name),
        keys=np.array(keys),
        vectors=np.stack([vectors[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32),
    )
    partial.replace(path)


@contextmanager
def cached_embeddings(path: Path) -> Iterator[CachedEmbeddings]:
    """Within the block, the configured model answers from the cache at ``path`` (an ``.npz`` file,
    created if absent); new vectors are written back when the block ends."""
    model = embedding_models.embedding_model()
    cache = CachedEmbeddings(model, _load(path, model.name))
    # The process's one instance of the configured model is swapped for the block: every caller
    # (the index outbox, the semantic arm's query) goes through ``embedding_model`` and gets the cache.
    with mock.patch.dict(embedding_models._models, {model.name: cache}):
        yield cache
    if cache.misses:
        _save(path, model.name, cache.vectors)
