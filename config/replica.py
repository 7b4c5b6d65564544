"""Read scopes: read-only work served by a streaming replica, with the primary's guarantees.

With ``DATABASE_REPLICA_URL`` set, the settings define the ``replica`` alias: a physical (streaming)
replica of the primary, so it holds the same rows, the same SQL functions (``engram_audience_allows``,
the lineage checks) and the same triggers' results, and eligibility decided there is eligibility
decided on the primary as of a later commit. :func:`routed_read` marks a function whose database work
is reads (recall, history search, the turn view, the admin's lists); each call decides once where it
reads:

* the primary, when the calling transaction has written (``pg_current_xact_id_if_assigned``): its
  uncommitted rows exist nowhere else;
* the replica, once it has replayed the primary's WAL up to the position the primary reports at the
  start of the call (``pg_current_wal_lsn`` / ``pg_last_wal_replay_lsn``). Every commit acknowledged
  before the call, this turn's own included, is then visible there: a turn reads its own writes;
* the primary again when the replica has not got there within ``ENGRAM_REPLICA_MAX_LAG_MS`` (its lag
  is past the bound), or cannot be reached (it is then not asked again for ``ENGRAM_REPLICA_RETRY_S``),
  or fails during the call: the call is run again on the primary, which is safe because it only reads.
  The caller sees no error in any of these cases.

Retrieval's SQL is written against the default connection (``django.db.connection``, the ORM and
``prepared_cursor`` alike), so inside a replica scope this thread's ``default`` alias *is* the replica's
connection. A write there fails loudly (a hot standby refuses it) instead of landing anywhere: the
rows a read writes about itself (its audit) go through :func:`on_primary`, which ``config.audit``'s
``read_audit_transaction`` uses. Without the replica alias every scope reads the primary and nothing
changes.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db import Error as DatabaseError  # InterfaceError (a lost connection) is not a DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

log = logging.getLogger(__name__)

REPLICA_ALIAS = "replica"
P = ParamSpec("P")
T = TypeVar("T")

#: One primary round trip: whether this transaction has written, and the WAL position to wait for.
PRIMARY_POSITION_SQL = "SELECT pg_current_xact_id_if_assigned() IS NOT NULL, pg_current_wal_lsn()::text"
#: On the replica: whether it is still a replica, has replayed up to that position, and how far behind.
REPLAY_SQL = (
    "SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false),"
    " coalesce(pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()), 0)::bigint"
)
POLL_S = 0.002


@dataclass
class _Serving:
    alias: str
    primary: BaseDatabaseWrapper
    primary_active: bool = False


_serving: ContextVar[_Serving | None] = ContextVar("engram_read_scope", default=None)


@dataclass
class ReplicaStats:
    """What this process saw of the replica (reads served, fallbacks by reason, last measured lag)."""

    served: int = 0
    primary_wrote: int = 0
    lagging: int = 0
    unavailable: int = 0
    failed: int = 0
    last_lag_bytes: int = 0
    down_until: float = 0.0


stats = ReplicaStats()


def reset_stats() -> None:
    """Forget what this process saw (tests, and a fault scenario between its phases)."""
    for name, value in ReplicaStats().__dict__.items():
        setattr(stats, name, value)


_lock = threading.Lock()


def replica_configured() -> bool:
    return bool(settings.ENGRAM_READ_REPLICA)


def current_read_alias() -> str | None:
    """The alias the current read scope reads from (None outside a replica scope)."""
    serving = _serving.get()
    return None if serving is None or serving.primary_active else serving.alias


def choose_read_alias() -> str:
    """Where a read starting now may read: the replica when it has replayed every commit made before
    now and this transaction has written nothing, else the primary (see the module's docstring)."""
    if not replica_configured():
        return DEFAULT_DB_ALIAS
    if time.monotonic() < stats.down_until:
        return DEFAULT_DB_ALIAS
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(PRIMARY_POSITION_SQL)
        wrote, position = cursor.fetchone()
    if wrote:
        stats.primary_wrote += 1
        return DEFAULT_DB_ALIAS
    deadline = time.monotonic() + settings.ENGRAM_REPLICA_MAX_LAG_MS / 1000
    replica = connections[REPLICA_ALIAS]
    try:
        while True:
            with replica.cursor() as cursor:
                cursor.execute(REPLAY_SQL, [position, position])
                in_recovery, replayed, lag = cursor.fetchone()
            stats.last_lag_bytes = int(lag)
            if not in_recovery:  # promoted: it no longer follows this primary
                _mark_down("it is no longer in recovery (promoted)")
                return DEFAULT_DB_ALIAS
            if replayed:
                stats.served += 1
                return REPLICA_ALIAS
            if time.monotonic() >= deadline:
                stats.lagging += 1
                return DEFAULT_DB_ALIAS
            time.sleep(POLL_S)
    except DatabaseError as error:
        _mark_down(str(error).strip())
        return DEFAULT_DB_ALIAS


def _mark_down(reason: str) -> None:
    with _lock:
        stats.unavailable += 1
        stats.down_until = time.monotonic() + settings.ENGRAM_REPLICA_RETRY_S
    log.warning("read replica unavailable, reading the primary for %ss: %s", settings.ENGRAM_REPLICA_RETRY_S, reason)
    with suppress(DatabaseError):
        connections[REPLICA_ALIAS].close()


@contextmanager
def _serve(alias: str) -> Iterator[None]:
    primary = connections[DEFAULT_DB_ALIAS]
    token = _serving.set(_Serving(alias=alias, primary=primary))
    connections[DEFAULT_DB_ALIAS] = connections[alias]
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS] = primary
        _serving.reset(token)


class PrimaryError(Exception):
    """Carries an error raised on the primary out of a replica scope, so it is not retried."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@contextmanager
def on_primary() -> Iterator[None]:
    """Inside a replica scope, run the block on the primary's connection (the rows a read writes
    about itself). Outside one, a no-op."""
    serving = _serving.get()
    if serving is None or serving.primary_active:
        yield
        return
    replica = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = serving.primary
    serving.primary_active = True
    try:
        yield
    except DatabaseError as error:
        raise PrimaryError(error) from error
    finally:
        serving.primary_active = False
        connections[DEFAULT_DB_ALIAS] = replica


def routed_read(function: Callable[P, T]) -> Callable[P, T]:
    """Run ``function`` (whose database work is reads, apart from :func:`on_primary` blocks) on the
    replica when :func:`choose_read_alias` allows it; on a replica failure, run it again on the primary."""

    @functools.wraps(function)
    def routed(*args: P.args, **kwargs: P.kwargs) -> T:
        if _serving.get() is not None:  # nested: the outer scope has decided
            return function(*args, **kwargs)
        alias = choose_read_alias()
        if alias == DEFAULT_DB_ALIAS:
            return function(*args, **kwargs)
        try:
            with _serve(alias):
                return function(*args, **kwargs)
        except PrimaryError as wrapped:
            raise wrapped.error from None
        except DatabaseError as error:
            # The replica failed mid-read (it stopped, or cancelled a query that conflicted with
            # recovery). Nothing was written: the read runs again on the primary.
            stats.failed += 1
            _mark_down(str(error).strip())
            return function(*args, **kwargs)

    return routed


def replica_status() -> dict[str, Any]:
    return {"configured": replica_configured(), **stats.__dict__}
