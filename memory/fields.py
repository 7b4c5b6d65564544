from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models


class Float4Field(models.FloatField):
    """A single-precision float (``real``): half the space of ``double precision`` for vector parts."""

    def db_type(self, connection: Any) -> str:
        return "real"


class VectorField(ArrayField):
    """Embedding storage: ``real[]`` in the schema, pgvector's ``vector`` where the server has it.

    The migrations declare a plain array, which keeps every one of them valid on a PostgreSQL
    without pgvector; where the ``vector`` extension exists, ``memory/0013`` turns the column into
    ``vector`` (an array costs a conversion for every distance computed: ~3 µs a row, five times the
    distance itself). Searches read ``vector::vector(dims)`` either way, which is what the HNSW index
    is built on. Writes are lists of floats on both (pgvector assigns ``double precision[]`` to
    ``vector``); reads are lists of floats on both.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[float] | None:
        if isinstance(value, str):  # pgvector's text form: "[0.1,0.2,...]"
            return [float(part) for part in value.strip("[]").split(",")]
        return value


def vector_field() -> VectorField:
    return VectorField(Float4Field())
