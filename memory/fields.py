from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models


class Float4Field(models.FloatField):
    """A single-precision float (``real``): half the space of ``double precision`` for vector parts."""

    def db_type(self, connection: Any) -> str:
        return "real"


def vector_field() -> ArrayField:
    """Embedding storage as ``real[]``.

    A plain array keeps every migration valid on a PostgreSQL without pgvector; where the ``vector``
    extension exists, distances and the HNSW index use the cast ``vector::vector(dims)``.
    """
    return ArrayField(Float4Field())
