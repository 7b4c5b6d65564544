"""The cursor Engram's connections use: Django's, reading timestamps with psycopg's compiled loader."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.postgresql.base import Cursor as DjangoCursor  # type: ignore[attr-defined]
from psycopg.types.datetime import TimestamptzLoader

#: psycopg's timestamptz loader: the compiled one where ``psycopg[binary]`` provides it (the lookup
#: psycopg's own ``register_loader`` does for its classes), else the Python one.
COMPILED_TIMESTAMPTZ_LOADER: type[TimestamptzLoader] = psycopg.adapters._get_optimised(TimestamptzLoader)


class Cursor(DjangoCursor):
    """Django's client-side-binding cursor, reading ``timestamptz`` with psycopg's own loader.

    Django registers a Python subclass of that loader on the connection (to attach its time zone), so
    every timestamp a query returns would be parsed in Python: some 1,500 a turn (candidates' validity
    and recording times), at 2.6 µs each against 0.15 µs compiled (60,000 values read both ways).
    When the session's time zone is UTC, which Django sets from ``TIME_ZONE`` with ``USE_TZ``,
    psycopg's loader returns the same values (aware, in UTC); in any other zone Django's loader stays.
    """

    def __init__(self, connection: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(connection, *args, **kwargs)
        if connection.info.parameter_status("TimeZone") == "UTC":
            self.adapters.register_loader("timestamptz", COMPILED_TIMESTAMPTZ_LOADER)
