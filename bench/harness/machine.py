"""How fast this machine runs Python right now, reported beside a benchmark's figures.

A virtual machine's speed moves between boots, and within one boot from minute to minute, by more
than most code changes move a benchmark. ``bench_turn``, ``loadtest`` and ``bench_all`` therefore print
a fixed probe measured just before and just after their measurement: a pure-Python loop adding 1 five
million times, the median of three runs. The probe times Python alone: runs whose probes differ do
not compare, but agreeing probes do not make them comparable either (the database side of a machine
can slow while its Python does not), so code is compared by alternating runs within one session.
"""

from __future__ import annotations

import statistics
import time

PROBE_ADDITIONS = 5_000_000
PROBE_RUNS = 3


def cpu_probe_seconds() -> float:
    """The median wall time, in seconds, of :data:`PROBE_RUNS` runs of the probe loop."""
    runs = []
    for _ in range(PROBE_RUNS):
        started = time.perf_counter()
        total = 0
        for _ in range(PROBE_ADDITIONS):
            total += 1  # noqa: SIM113 - the addition is the probe
        runs.append(time.perf_counter() - started)
    return round(statistics.median(runs), 3)
