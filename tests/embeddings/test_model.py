"""The default embedding model: offline, verified, and sentence-transformers' pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from memory.embeddings.model import MiniLMOnnx, ModelUnavailable, embedding_model


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
    assert np.allclose(alone, batched, atol=1e-5)  # padding never leaks into the mean


def test_a_model_file_that_does_not_match_its_pinned_sha256_is_refused() -> None:
    class Tampered(MiniLMOnnx):
        sha256 = "0" * 64

    with pytest.raises(ModelUnavailable, match="sha256"):
        Tampered().embed(["anything"])
