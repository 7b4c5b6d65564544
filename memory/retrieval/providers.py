"""Candidate providers (semantic search and other non-SQL arms) and the shared deadline they run under.

A provider only proposes ids with ranks. Whatever it returns is revalidated against the eligible set
when candidates are hydrated, so a provider can never add a row that eligibility removed; a provider
that fails or misses the deadline degrades the read to the SQL arms' authorized results and names the
degradation category (``<name>_unavailable``, ``<name>_timeout``), never to unauthorized ones.

Providers that query Engram's own database (``in_database = True``) run in the request's connection,
so they see its transaction, under a ``statement_timeout`` equal to the remaining deadline; others
(a remote vector store) run in worker threads and are abandoned at the deadline. A provider that runs
providers of its own runs them within what is left of its own deadline, never a fresh one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextvars import ContextVar
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from django.db import close_old_connections, connection, transaction

log = logging.getLogger(__name__)

#: Semantic search deadline shared by every provider of one read.
PROVIDER_DEADLINE_S = 3.0
#: The deadline (``time.monotonic()``) of the providers running now in this context, if any: providers
#: run inside a provider end by it too.
_enclosing_deadline: ContextVar[float | None] = ContextVar("enclosing_provider_deadline", default=None)


class ProviderTimeout(Exception):
    """Raised by a provider that ran out of its deadline without a statement timing out (for instance
    one whose own providers did): it degrades as ``<name>_timeout``."""


class ArmHit(NamedTuple):
    """One candidate from one arm: the target row's id (a revision or a message), its rank, a score.

    A named tuple: the arms statement returns hundreds a recall, and a tuple is built several times
    faster than a frozen dataclass."""

    arm: str
    target_id: int
    rank: int
    score: float


@runtime_checkable
class IndexedArm(Protocol):
    """A provider that can rank only the texts its index already holds: the semantic arms, whose
    vectors a worker writes a few tenths of a second after the text is."""

    name: str

    def indexed_sql(self, target: str) -> str:
        """An SQL condition, true when the index holds the text whose id is the SQL expression
        ``target``: the statement that hydrates the candidates reads it beside each one (one probe of
        the index's unique key per candidate, in the same round trip)."""
        ...


def unindexed_column(providers: Iterable[object], target: str) -> str:
    """An SQL ``text[]`` expression: the names of the :class:`IndexedArm` providers whose index does
    not hold the text whose id is ``target`` (an empty array when there is none)."""
    indexed = [p for p in providers if isinstance(p, IndexedArm)]
    if not indexed:
        return "'{}'::text[]"
    cases = ", ".join(f"CASE WHEN NOT ({p.indexed_sql(target)}) THEN '{p.name}' END" for p in indexed)
    return f"array_remove(ARRAY[{cases}]::text[], NULL)"


def unranked_by_arm(
    arms: Collection[str], hits: Iterable[ArmHit], unindexed: Mapping[int, Collection[str]]
) -> dict[str, set[int]]:
    """For each of ``arms``, the ids it did not propose because its index does not hold them yet
    (``unindexed``: each hydrated id's arms that could not rank it, read with it). Such an arm's
    silence about a text says nothing about how well it matches: the fusion leaves the arm out of that
    text's scale instead of reading it as a poor match."""
    proposed: dict[str, set[int]] = {}
    for hit in hits:
        proposed.setdefault(hit.arm, set()).add(hit.target_id)
    unranked: dict[str, set[int]] = {}
    for target_id, names in unindexed.items():
        for name in names:
            if name in arms and target_id not in proposed.get(name, ()):
                unranked.setdefault(name, set()).add(target_id)
    return unranked


@dataclass(frozen=True)
class ProviderCall:
    name: str
    in_database: bool
    call: Callable[[], Sequence[ArmHit]]


@dataclass(frozen=True)
class ProviderOutcome:
    hits: list[ArmHit]
    degradation: str
    latency_ms: dict[str, float]
    #: The providers that failed or missed the deadline: they did not run, as far as ranking goes.
    failed: frozenset[str] = frozenset()


def run_providers(
    calls: Sequence[ProviderCall], *, cap: int, deadline_s: float = PROVIDER_DEADLINE_S
) -> ProviderOutcome:
    if not calls:
        return ProviderOutcome([], "", {})
    deadline = time.monotonic() + deadline_s
    enclosing = _enclosing_deadline.get()
    if enclosing is not None:
        deadline = min(deadline, enclosing)
    hits: list[ArmHit] = []
    degraded: list[str] = []
    failed: set[str] = set()
    latency: dict[str, float] = {}

    remote = [c for c in calls if not c.in_database]
    pool = ThreadPoolExecutor(max_workers=len(remote)) if remote else None
    futures = {}
    if pool is not None:
        for provider in remote:
            futures[provider.name] = (pool.submit(_in_thread, provider.call), time.perf_counter())
    try:
        for provider in (c for c in calls if c.in_database):
            started = time.perf_counter()
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    # A local setting lasts until the end of the enclosing transaction, not this
                    # savepoint: the previous limit is read (in the subquery, before the outer row
                    # sets the new one) and restored, so later statements of a caller's transaction
                    # keep it.
                    cursor.execute(
                        "SELECT previous, set_config('statement_timeout', %s, true)"
                        " FROM (SELECT current_setting('statement_timeout') AS previous OFFSET 0) s",
                        [str(remaining_ms)],
                    )
                    row = cursor.fetchone()
                    previous = row[0] if row else "0"
                    entered = _enclosing_deadline.set(deadline)
                    try:
                        hits.extend(list(provider.call())[:cap])
                    finally:
                        _enclosing_deadline.reset(entered)
                        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
            except Exception as error:  # any provider failure degrades to the SQL arms, by contract
                timed_out = isinstance(error, ProviderTimeout) or "statement timeout" in str(error)
                degraded.append(f"{provider.name}_{'timeout' if timed_out else 'unavailable'}")
                failed.add(provider.name)
                log.warning("provider %s failed: %s", provider.name, error)
            latency[provider.name] = round((time.perf_counter() - started) * 1000, 3)
        for name, (future, started) in futures.items():
            try:
                hits.extend(list(future.result(timeout=max(0.0, deadline - time.monotonic())))[:cap])
            except FutureTimeout:
                degraded.append(f"{name}_timeout")
                failed.add(name)
            except Exception as error:  # any provider failure degrades to the SQL arms, by contract
                degraded.append(f"{name}_unavailable")
                failed.add(name)
                log.warning("provider %s failed: %s", name, error)
            latency[name] = round((time.perf_counter() - started) * 1000, 3)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    return ProviderOutcome(hits, ",".join(degraded), latency, frozenset(failed))


def _in_thread(call: Callable[[], Sequence[ArmHit]]) -> Sequence[ArmHit]:
    try:
        return call()
    finally:
        close_old_connections()
