"""The load test's report: replies the pre-delivery recheck withheld are counted, apart from errors."""

from __future__ import annotations

import io
import json
from typing import Any

from bench.harness.server import CpuAccount
from bench.management.commands.loadtest import Command


def reported(result: dict[str, Any], cpu: CpuAccount | None = None) -> dict[str, Any]:
    out = io.StringIO()
    Command(stdout=out).report(result, users=2, probe={"before": 0.31, "after": 0.35}, cpu=cpu)
    return dict(json.loads(out.getvalue().splitlines()[-1]))


def a_run(**extra: Any) -> dict[str, Any]:
    return {
        "started": 100.0,
        "stopped": 110.0,
        "samples": {"ingest": [10.0, 12.0], "reply": [20.0, 25.0], "turn": [60.0, 80.0]},
        "examples": [],
        **extra,
    }


def test_withheld_replies_are_reported_and_are_not_errors() -> None:
    result = reported(a_run(errors={"reply": 0}, withheld={"reply": 1}))

    assert result["withheld"] == 1
    assert result["errors"] == 0
    assert result["requests"] == 4


def test_failed_requests_and_turns_are_errors() -> None:
    result = reported(a_run(errors={"reply": 1, "turn": 1}, withheld={}))

    assert result["errors"] == 2
    assert result["withheld"] == 0


def test_the_machine_probe_is_reported_beside_the_figures() -> None:
    result = reported(a_run(errors={}, withheld={}))

    assert result["cpu_probe_s"] == {"before": 0.31, "after": 0.35}


def test_the_cpu_the_run_cost_is_reported_as_seconds_and_as_a_share_of_the_cores() -> None:
    cpu = CpuAccount(server_pid=1, database_pid=2)
    cpu.cores, cpu.wall_s, cpu.server_s, cpu.database_s, cpu.children_s = 2, 10.0, 9.0, 6.0, 1.0

    result = reported(a_run(errors={}, withheld={}), cpu)

    assert result["cpu_s"] == {"server": 9.0, "database": 6.0, "load": 1.0}
    assert result["cores_busy"] == 0.8


def test_a_remote_database_leaves_its_cpu_unknown_and_out_of_the_share() -> None:
    cpu = CpuAccount(server_pid=1, database_pid=None)
    cpu.cores, cpu.wall_s, cpu.server_s, cpu.children_s = 2, 10.0, 9.0, 1.0

    result = reported(a_run(errors={}, withheld={}), cpu)

    assert result["cpu_s"]["database"] is None
    assert result["cores_busy"] == 0.5
