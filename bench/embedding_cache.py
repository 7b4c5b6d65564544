"""An opt-in cache of embedding vectors for repeated evaluation runs (``eval_locomo --embedding-cache``).

A hybrid or semantic evaluation embeds the whole transcript before it asks anything, and that is most
of its time; the vectors do not change between runs of the same model. The cache wraps the process's
configured model: a text seen before gets the vector the model returned for it then, any other text is
embedded by the model itself and remembered. The model embeds each text alone (see
:class:`memory.embeddings.model.MiniLMOnnx`), so a text's vector never depends on what it was embedded
beside, and a cached vector is exactly the one the model would return now. Everything else (the index
outbox, the stored vectors, the search) runs as it does without the cache.

The file is keyed by the model's name: vectors of another model are never read.

Two more options compare another embedding model without building it into Engram
(:func:`embedding_options`): ``--embedding-texts FILE`` writes every text a run embedded (a JSON list,
in first-seen order), an outside encoder (``scripts/encode_texts``) writes that model's vectors for them
in this file's format, and ``--embedding-vectors FILE`` runs the evaluation again with those vectors in
place of the configured model's. Everything downstream (the stored vectors, the exact search over them,
the ranking) is the product's own; only where the vectors come from changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from django.core.management.base import CommandError, CommandParser

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


def _read(path: Path) -> tuple[str, dict[str, np.ndarray[Any, Any]]]:
    """The file's model name and its vectors by text key."""
    with np.load(path, allow_pickle=False) as stored:
        return str(stored["model"]), dict(zip((str(k) for k in stored["keys"]), stored["vectors"], strict=True))


def _load(path: Path, model_name: str) -> dict[str, np.ndarray[Any, Any]]:
    if not path.exists():
        return {}
    stored_model, vectors = _read(path)
    return vectors if stored_model == model_name else {}


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


class RecordedTexts:
    """The configured model, noting every text it is asked to embed (each once, first-seen order)."""

    def __init__(self, model: embedding_models.EmbeddingModel) -> None:
        self.model = model
        self.name = model.name
        self.dims = model.dims
        self.texts: dict[str, None] = {}

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.texts.update(dict.fromkeys(texts))
        return self.model.embed(texts)


class OutsideVectors:
    """Another model's vectors, read from a file in this module's format, answering under the
    configured model's name. A text the file lacks gets no vector at all, never one of another model:
    the embedding fails as the model's would, and :func:`outside_vectors` fails the run."""

    def __init__(self, name: str, source_model: str, vectors: dict[str, np.ndarray[Any, Any]]) -> None:
        self.name = name
        self.source_model = source_model
        self.vectors = vectors
        self.dims = len(next(iter(vectors.values()))) if vectors else 0
        self.missing: dict[str, None] = {}

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        missing = [text for text in texts if text_key(text) not in self.vectors]
        if missing:
            self.missing.update(dict.fromkeys(missing))
            raise embedding_models.ModelUnavailable(f"{len(missing)} text(s) have no vector from {self.source_model}")
        return np.stack([self.vectors[text_key(text)] for text in texts]).astype(np.float32)


@contextmanager
def recorded_texts(path: Path) -> Iterator[RecordedTexts]:
    """Within the block, every text the configured model embeds is noted; the list is written to
    ``path`` as JSON when the block ends."""
    recorder = RecordedTexts(embedding_models.embedding_model())
    with mock.patch.dict(embedding_models._models, {recorder.name: recorder}):
        yield recorder
    path.write_text(json.dumps(list(recorder.texts)))


@contextmanager
def outside_vectors(path: Path) -> Iterator[OutsideVectors]:
    """Within the block, the configured model's name answers with the vectors stored at ``path``. The
    product degrades where a model fails (a search without its semantic arm), so a text without a
    vector would quietly lower the figures: the block raises instead, once the run is over."""
    outside = OutsideVectors(embedding_models.embedding_model().name, *_read(path))
    with mock.patch.dict(embedding_models._models, {outside.name: outside}):
        yield outside
    if outside.missing:
        raise CommandError(
            f"{len(outside.missing)} text(s) the run embedded have no vector in {path} "
            f"(e.g. {next(iter(outside.missing))[:60]!r}): write them with --embedding-texts and encode them all"
        )


def add_embedding_arguments(parser: CommandParser) -> None:
    """The evaluation commands' options for where their vectors come from."""
    parser.add_argument(
        "--embedding-cache",
        default=None,
        help="An .npz file of vectors the model returned before, read and extended (bench/embedding_cache.py): "
        "repeated hybrid or semantic runs skip re-embedding the same texts. Off unless given.",
    )
    parser.add_argument(
        "--embedding-texts",
        default=None,
        help="Write every text the run embedded to this file (a JSON list), for an outside encoder.",
    )
    parser.add_argument(
        "--embedding-vectors",
        default=None,
        help="Answer every embedding from this .npz of another model's vectors (scripts/encode_texts), "
        "in place of the configured model.",
    )


@contextmanager
def embedding_options(options: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The context an evaluation runs in, from :func:`add_embedding_arguments`' options: at most one of
    the cache and the outside vectors, and the texts noted with either. It yields the run report's label
    of where the vectors came from (empty for the configured model's own)."""
    if options.get("embedding_cache") and options.get("embedding_vectors"):
        raise CommandError("--embedding-cache and --embedding-vectors exclude each other")
    vectors = options.get("embedding_vectors")
    if vectors and not Path(vectors).is_file():
        raise CommandError(f"--embedding-vectors: {vectors} does not exist")
    texts = options.get("embedding_texts")
    if texts and not Path(texts).resolve().parent.is_dir():
        raise CommandError(f"--embedding-texts: the folder of {texts} does not exist")
    label: dict[str, str] = {}
    with ExitStack() as stack:
        if options.get("embedding_cache"):
            stack.enter_context(cached_embeddings(Path(options["embedding_cache"])))
        if vectors:
            label["embedding_vectors"] = stack.enter_context(outside_vectors(Path(vectors))).source_model
        if texts:
            stack.enter_context(recorded_texts(Path(texts)))
        yield label
