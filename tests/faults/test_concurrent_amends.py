"""Concurrent amends of one memory: of N runtimes amending the same entry from the same revision at
the same moment, exactly one wins and the others are told ``stale_revision``; no amend is lost or
doubled (revision numbers stay contiguous, one ledger row per winner).

Each runtime is a thread with its own database connection (``transactional_db``: every write really
commits), released at the end of the thread; a barrier lines their requests up.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from config.errors import Conflict
from memory.models import MemoryOperation, MemoryRevision, Operation, parse_short_id
from memory.services import Provenance, revision_amend
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory

CONTENDERS = 8
WAVES = 3
JOIN_TIMEOUT_S = 60


def race(work: Callable[[int], Any], count: int) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads released together; their results (or exceptions) in order."""
    barrier = threading.Barrier(count, timeout=30)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except Exception as error:  # reported to the test, which asserts on it
            results[index] = error
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "an amend hung"
    return results


@pytest.fixture
def runtime(transactional_db: None) -> Runtime:
    runtime = runtime_for(AgentFactory.create())
    runtime.say("general", "U100", "Morning all")
    return runtime


def test_concurrent_amends_over_http_one_wins_per_revision_and_none_is_lost(runtime: Runtime) -> None:
    first = runtime.turn("general", "U100", "The deploy window is Friday.")
    made = runtime.round(first["turn_id"], {"verb": "remember", "body": "Deploys happen on Friday."}).json()
    memory_id = made["results"][0]["result"]["id"]
    entry_id = made["results"][0]["result"]["entry_id"]

    for wave in range(WAVES):
        # One turn per contender, opened beforehand: the race is between the amends alone.
        turns = [runtime.turn("general", "U100", f"Correction {wave}.{n}")["turn_id"] for n in range(CONTENDERS)]

        def amend(index: int, turns: list[int] = turns, wave: int = wave, cited: str = memory_id) -> Any:
            call = {"verb": "amend", "id": cited, "body": f"Deploys happen on day {wave}.{index}."}
            response = runtime.round(turns[index], call)
            assert response.status_code == 200, response.json()
            return response.json()["results"][0]

        results = race(amend, CONTENDERS)
        assert not [r for r in results if isinstance(r, BaseException)], results
        outcomes = Counter((r["status"], r["code"]) for r in results)
        assert outcomes == {("ok", ""): 1, ("error", "stale_revision"): CONTENDERS - 1}, outcomes
        winner = next(r for r in results if r["status"] == "ok")
        assert winner["result"]["revision"] == wave + 2
        memory_id = winner["result"]["id"]  # the next wave amends the new current revision

    numbers = list(MemoryRevision.objects.filter(entry_id=entry_id).order_by("number").values_list("number", flat=True))
    assert numbers == list(range(1, WAVES + 2))  # contiguous: nothing lost, nothing doubled
    assert MemoryOperation.objects.filter(entry_id=entry_id, kind=Operation.AMEND).count() == WAVES
    current = MemoryRevision.objects.get(entry_id=entry_id, number=WAVES + 1)
    assert current.entry.current_revision_id == current.pk == parse_short_id(memory_id)


def test_concurrent_amends_through_the_service_raise_409_stale_revision_for_all_but_one(runtime: Runtime) -> None:
    first = runtime.turn("general", "U100", "The standup is at ten.")
    made = runtime.round(first["turn_id"], {"verb": "remember", "body": "Standup is at ten."}).json()
    entry_id = made["results"][0]["result"]["entry_id"]
    expected = made["results"][0]["result"]["revision_id"]

    def amend(index: int) -> Any:
        return revision_amend(
            agent=runtime.agent,
            entry_id=entry_id,
            expected_revision_id=expected,
            provenance=Provenance(),
            body=f"Standup is at {index} past ten.",
        )

    results = race(amend, CONTENDERS)
    conflicts = [r for r in results if isinstance(r, Conflict)]
    written = [r for r in results if not isinstance(r, BaseException)]
    assert len(written) == 1 and len(conflicts) == CONTENDERS - 1, results
    assert {(c.status, c.code) for c in conflicts} == {(409, "stale_revision")}
    assert {c.detail["current_revision_id"] for c in conflicts} == {written[0].revision.pk}
    numbers = list(MemoryRevision.objects.filter(entry_id=entry_id).order_by("number").values_list("number", flat=True))
    assert numbers == [1, 2]
