"""The benchmarks' CPU accounting of a server's process tree."""

from __future__ import annotations

import os
import subprocess
import sys

from memory.bench.server import process_tree_cpu_seconds

#: A child's busy loop: a few tenths of a second of CPU on any machine this runs on.
BUSY_CHILD = "x = 0\nfor _ in range(3_000_000):\n    x += 1\n"


def test_a_descendant_that_has_ended_keeps_its_cpu_in_the_total() -> None:
    before = process_tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BUSY_CHILD], check=True)
    after = process_tree_cpu_seconds(os.getpid())
    # The child started after the first reading and was reaped before the second: only its parent's
    # count of reaped children holds its CPU.
    assert after - before >= 0.05
