"""The default embedding model: offline, verified, and sentence-transformers' pipeline."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from memory.embeddings.model import MiniLMOnnx, ModelUnavailable, embedding_model, integer_matmul_graph


def test_the_default_model_embeds_offline_into_unit_384_dimension_vectors() -> None:
    model = embedding_model()
    vectors = model.embed(["keep it brief", "prefers concise prose-first writing", "favorite food is ramen"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.15  # a paraphrase is nearer than an unrelated fact


def test_embedding_is_deterministic_and_batch_independent() -> None:
    model = embedding_model()
    alone = model.embed(["The launch moved to March 3."])[0]
    batched = model.embed(["short", "The launch moved to March 3.", "a much longer sentence " * 20])[1]
    assert np.allclose(alone, batched, atol=1e-6)  # neither padding nor neighbours change a vector


def test_every_int8_projection_runs_in_integer_kernels_and_agrees_with_the_float_computation() -> None:
    model = MiniLMOnnx()
    exported = model.model_path.read_bytes()
    integer = onnx.load_from_string(integer_matmul_graph(exported))
    operators = Counter(node.op_type for node in integer.graph.node)
    # Six layers of four attention and two feed-forward projections. The only int8 tensors still
    # turned into floats are the two embedding tables, which are looked up, not multiplied.
    assert operators["DynamicQuantizeMatMul"] == 36
    assert operators["MatMul"] == 12  # attention scores and weighted values: activations by activations
    int8_weights = {t.name for t in integer.graph.initializer if t.data_type == onnx.TensorProto.INT8}
    dequantised = [node for node in integer.graph.node if node.op_type == "Cast" and node.input[0] in int8_weights]
    assert sorted(node.input[0] for node in dequantised) == [
        "inner.embeddings.position_embeddings.weight_q",
        "inner.embeddings.word_embeddings.weight_q",
    ]

    texts = ["keep it brief", "The launch moved to March 3.", "Caroline went to the LGBTQ support group yesterday " * 3]
    float_session = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(model.tokenizer_path))
    tokenizer.no_padding()
    for text, vector in zip(texts, model.embed(texts), strict=True):
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        hidden = float_session.run(
            None, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        )[0][0].mean(axis=0)
        assert float(vector @ (hidden / np.linalg.norm(hidden))) > 0.97


def test_a_model_file_that_does_not_match_its_pinned_sha256_is_refused() -> None:
    class Tampered(MiniLMOnnx):
        sha256 = "0" * 64

    with pytest.raises(ModelUnavailable, match="sha256"):
        Tampered().embed(["anything"])
