from __future__ import annotations

import pytest
from django.db import connection

from memory.embeddings.index import vector_extension_installed


@pytest.fixture(autouse=True)
def _fresh_extension_check() -> None:
    vector_extension_installed.cache_clear()


@pytest.fixture
def pgvector(db: None) -> None:
    """Skips the test on a server without pgvector, where Engram runs lexical-only by design."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone() is None:
            pytest.skip("the server has no pgvector: Engram runs lexical-only there")


# The retrieval contracts' small workspace (an agent, three people, DMs and #general).
from tests.retrieval.conftest import ws  # noqa: E402, F401
