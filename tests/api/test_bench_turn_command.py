"""``bench_turn`` builds its corpus, serves the API with gunicorn on the test database, drives whole
turns through HTTP and ends with one JSON line of per-step latencies."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from history.models import Message
from memory.models import MemoryEntry


@pytest.mark.timeout(240)
def test_bench_turn_runs_tiny_and_reports_json(transactional_db: None) -> None:
    """The gunicorn server is another process: it sees only committed rows, hence ``transactional_db``.
    A second run reuses the corpus."""
    out = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "5", "--warmup", "1", stdout=out)
    lines = out.getvalue().strip().splitlines()
    result = json.loads(lines[-1])
    assert result["turns"] == 5
    assert set(result) == {"turns", "p50_ms", "p95_ms", "steps"}
    assert set(result["steps"]) == {"ingest", "turn_start", "round", "ledger", "reply"}
    for step in result["steps"].values():
        assert set(step) == {"p50_ms", "p95_ms"} and 0 < step["p50_ms"] <= step["p95_ms"]
    assert 0 < result["p50_ms"] <= result["p95_ms"]
    assert "corpus built" in lines[0]
    assert MemoryEntry.objects.count() == 200
    # The corpus, then per turn one inbound message and one delivered reply.
    assert Message.objects.count() == 1000 + 2 * (5 + 1)

    again = StringIO()
    call_command("bench_turn", "--memories", "200", "--messages", "1000", "--turns", "2", "--warmup", "0", stdout=again)
    assert "corpus reused" in again.getvalue().splitlines()[0]
    assert json.loads(again.getvalue().strip().splitlines()[-1])["turns"] == 2
