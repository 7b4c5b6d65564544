"""Engram's database backend: Django's PostgreSQL backend, reading timestamps with psycopg's compiled
loader and checking a persistent connection's health without a round trip.

Django registers a Python subclass of psycopg's ``timestamptz`` loader (to attach its time zone), so
every timestamp a query returns would be parsed in Python: some 1,500 a turn (candidates' validity and
recording times), at 2.6 µs each against 0.15 µs compiled (60,000 values read both ways). With
``USE_TZ`` Django sets every session's time zone to UTC, where psycopg's own loader returns the same
values (aware, in UTC). The loader is registered once in the adapters every connection starts from:
registering it on each cursor instead copied the cursor's adapter map, and opening a cursor took
26.5-31.3 µs of CPU against 18.8-22.5 µs now (three runs of 3,000 each, the two codes alternately).

With ``CONN_HEALTH_CHECKS``, Django sends ``SELECT 1`` before each request's first statement (and a
read worker's, before each task): six round trips a turn. :meth:`DatabaseWrapper.is_usable` answers
from the client side instead (see there).

Django's cursors bind parameters client-side, into the SQL text, so PostgreSQL parses and plans every
statement anew. The request path's fixed statements (an API key's lookup, a turn's row, the ledger, a
trace's insert: some thirty a turn, each a lookup or write by key) go through :func:`prepared_cursor`
instead, which binds server-side: once a connection has run one of them ``prepare_threshold`` times,
psycopg prepares it and PostgreSQL reuses its plan (a generic one as soon as it costs no more than the
plans made for the first values, which for a lookup by key is at once). Statements whose best plan
depends on their values (every statement that judges what a perspective may see: how many rows an
agent, an audience or a query's words select decides it) keep Django's cursors and are planned for
their values each time; a generic plan of a session snapshot's recall ran three times slower. The ORM
keeps them too: its ``__in`` lists and bulk inserts send a parameter per value, past the 65,535 a
server-side statement may carry, and ``pgtrigger.ignore`` sends two statements in one string.
"""

from __future__ import annotations

import functools
import select
from typing import Any, cast

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql import base
from django.db.backends.utils import CursorWrapper
from psycopg import pq
from psycopg.adapt import AdaptersMap
from psycopg.types.datetime import TimestamptzLoader

#: psycopg's timestamptz loader: the compiled one where ``psycopg[binary]`` provides it (the lookup
#: psycopg's own ``register_loader`` does for its classes), else the Python one.
COMPILED_TIMESTAMPTZ_LOADER: type[TimestamptzLoader] = psycopg.adapters._get_optimised(TimestamptzLoader)


#: Where a connection may be when its health is checked: between requests it is idle; ``SELECT 1``
#: would also succeed inside an open transaction, but fail in an aborted one.
USABLE_TRANSACTION_STATES = frozenset({pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS})


@functools.cache
def _with_compiled_timestamps(template: AdaptersMap) -> AdaptersMap:
    adapters = AdaptersMap(template)
    adapters.register_loader("timestamptz", COMPILED_TIMESTAMPTZ_LOADER)
    return adapters


def prepared_cursor(using: str = DEFAULT_DB_ALIAS) -> CursorWrapper:
    """A cursor whose statements psycopg prepares once the connection has run them often enough (see
    the module's docstring): for fixed statements that look rows up or write them by key."""
    return cast(DatabaseWrapper, connections[using]).prepared_cursor()


class DatabaseWrapper(base.DatabaseWrapper):
    def prepared_cursor(self) -> CursorWrapper:
        """:meth:`cursor`, binding server-side (Django's own cursor classes, wrapped the same way)."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = base.ServerBindingCursor(self.connection)  # type: ignore[attr-defined]
            return self._prepare_cursor(cursor)  # type: ignore[attr-defined]

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if settings.USE_TZ:
            params["context"] = _with_compiled_timestamps(params["context"])
        return params

    def is_usable(self) -> bool:
        """Whether this open connection can serve another request, judged without a round trip.

        A server that ends a connection says so on its socket: a restart or a terminated backend sends
        an error message and closes, an idle timeout closes; an idle connection the server still serves
        has nothing to read. So a connection that psycopg found closed or broken, that is neither idle
        nor idle in a transaction, or whose socket has anything to read is not reused, and the request
        opens a new one; anything unexpected waiting there costs a reconnection, never a failed
        request. As with ``SELECT 1``, a server that vanished without a word (a network partition) is
        found only by the request's first statement, which fails with 503 ``database_unavailable``;
        the failed connection is then replaced.
        """
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        pgconn = connection.pgconn
        if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status not in USABLE_TRANSACTION_STATES:
            return False
        try:
            waiting = select.poll()
            waiting.register(pgconn.socket, select.POLLIN | select.POLLPRI)
            return not waiting.poll(0)
        except (OSError, psycopg.OperationalError):
            return False

    def create_cursor(self, name: str | None = None) -> Any:
        if not settings.USE_TZ:
            return super().create_cursor(name)
        # Django's own version of this method re-registers its loader on the cursor whenever the
        # connection's differs from it, which is always the case here; it is otherwise the same.
        if not name:
            return self.connection.cursor()
        if self.settings_dict["OPTIONS"].get("server_side_binding") is not True:
            server_side_cursor = base.ServerSideCursor  # type: ignore[attr-defined]
            return server_side_cursor(self.connection, name=name, scrollable=False, withhold=self.connection.autocommit)
        return self.connection.cursor(name, scrollable=False, withhold=self.connection.autocommit)
