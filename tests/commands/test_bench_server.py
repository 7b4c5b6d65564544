"""The benchmarks' CPU accounting of a server's process tree, the database server and ended children."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.harness.server import CpuAccount, process_tree_cpu_seconds

#: A child that spins until it has used ``seconds`` of CPU.
BUSY = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"


def test_a_descendant_that_has_ended_keeps_its_cpu_in_the_total() -> None:
    before = process_tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BUSY.format(seconds=0.1)], check=True)
    after = process_tree_cpu_seconds(os.getpid())
    # The child started after the first reading and was reaped before the second: only its parent's
    # count of reaped children holds its CPU.
    assert after - before >= 0.05


def test_the_account_counts_the_servers_tree_and_the_load_generators_it_ran() -> None:
    server = subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=30)])
    try:
        with CpuAccount(server_pid=server.pid, database_pid=None) as cpu:
            subprocess.run([sys.executable, "-c", BUSY.format(seconds=0.4)], check=True)
    finally:
        server.kill()
        server.wait()

    assert cpu.children_s >= 0.3  # the ended child, as Locust's run is counted
    assert cpu.server_s >= 0.1  # the running process named as the server
    assert cpu.wall_s >= 0.4
