"""The load test's report: replies the pre-delivery recheck withheld are counted, apart from errors."""

from __future__ import annotations

import io
import json
from typing import Any

from memory.management.commands.loadtest import Command


def reported(result: dict[str, Any]) -> dict[str, Any]:
    out = io.StringIO()
    Command(stdout=out).report(result, users=2, probe={"before": 0.31, "after": 0.35})
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
