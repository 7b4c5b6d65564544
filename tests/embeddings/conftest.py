from __future__ import annotations

import pytest

from memory.embeddings.index import vectors_stored


@pytest.fixture(autouse=True)
def _fresh_vectors_check() -> None:
    vectors_stored.cache_clear()


@pytest.fixture
def pgvector(db: None) -> None:
    """Skips the test on a server without pgvector, where Engram runs lexical-only by design (the
    embedding tables do not exist there)."""
    if not vectors_stored():
        pytest.skip("the server has no pgvector: Engram runs lexical-only there")


# The retrieval contracts' small workspace (an agent, three people, DMs and #general).
from tests.retrieval.conftest import ws  # noqa: E402, F401
