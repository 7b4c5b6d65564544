"""The 50-agent load test against the cluster and against a single node, side by side in one run.

``eval "$(scripts/cluster env)"; manage.py loadtest_cluster [--users 50] [--duration 60] [--rounds 1]``

Both targets serve the same corpus (``loadtest``'s, built once in the cluster's primary) from the
same primary, with the same gunicorn capacity in all (four worker processes of two threads):

* **cluster**: haproxy in front of ``scripts/cluster``'s two app servers (two workers of two threads
  each), reads routed to the streaming replica, the Celery workers embedding what the load writes;
* **single node**: one gunicorn (four workers of two threads) on the primary alone, no replica, its
  indexing notifications left in a private folder (as ``loadtest`` does).

Odd rounds run the cluster then the single node, even rounds the other way round, each with
``--warmup`` seconds unmeasured and ``--duration`` measured, so that both meet the same machine at
nearly the same time; the last line
is one JSON object with both runs' figures and the cluster / single-node ratios of throughput and of
turn p50 / p95 / p99.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.harness.corpus import settle
from bench.harness.machine import cpu_probe_seconds
from bench.harness.server import served_process
from bench.harness.stats import percentile
from bench.management.commands.loadtest import Command as LoadtestCommand
from bench.management.commands.loadtest import LoadSpec, LocustRun, build_plan, ensure_corpus


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--users", type=int, default=50)
        parser.add_argument("--duration", type=int, default=60)
        parser.add_argument("--warmup", type=int, default=10)
        parser.add_argument("--rounds", type=int, default=1, help="Cluster-then-single pairs to run.")
        parser.add_argument("--memories", type=int, default=2_000)
        parser.add_argument("--messages", type=int, default=20_000)
        parser.add_argument("--agents", type=int, default=10)
        parser.add_argument("--spawn-rate", type=float, default=10.0)
        parser.add_argument("--wait", default="1,3")
        parser.add_argument("--think", default="0.1,0.4")
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args: Any, **options: Any) -> None:
        cluster_url = os.environ.get("ENGRAM_CLUSTER_URL", "")
        if not cluster_url or not os.environ.get("DATABASE_REPLICA_URL"):
            raise CommandError('run it against the cluster: eval "$(scripts/cluster env)" first')
        spec = LoadSpec(
            revisions=options["memories"], agents=options["agents"], seed=options["seed"], messages=options["messages"]
        )
        agents, built = ensure_corpus(spec)
        self.stdout.write(f"corpus {'built' if built else 'reused'}: {spec.agents} agents (tenant loadtest)")
        settle()
        plan = build_plan(agents, random.Random(spec.seed))
        reporter = LoadtestCommand()
        reporter.stdout = self.stdout
        results: dict[str, list[dict[str, Any]]] = {"cluster": [], "single": []}

        with tempfile.TemporaryDirectory(prefix="engram-loadtest-cluster-") as scratch:
            folder = Path(scratch)
            plan_path = folder / "plan.json"
            plan_path.write_text(json.dumps(plan))
            for round_number in range(1, options["rounds"] + 1):
                # Odd rounds measure the cluster first, even rounds the single node first: a machine
                # growing busier or quieter during the run favours neither.
                order = ("cluster", "single") if round_number % 2 else ("single", "cluster")
                for target in order:
                    if target == "cluster":
                        self.stdout.write(f"round {round_number}: cluster ({cluster_url}, haproxy, two app servers)")
                        results["cluster"].append(self.measure(reporter, cluster_url, plan_path, folder, options))
                        continue
                    with served_process(
                        folder,
                        workers=4,
                        threads=2,
                        options=("--timeout", "60", "--keep-alive", "30"),
                        env={"ENGRAM_LOG_LEVEL": "WARNING", "DATABASE_REPLICA_URL": ""},
                    ) as (single_url, _):
                        self.stdout.write(f"round {round_number}: single node ({single_url}, 4 workers x 2 threads)")
                        results["single"].append(self.measure(reporter, single_url, plan_path, folder, options))

        summary = {name: _combined(runs) for name, runs in results.items()}
        cluster, single = summary["cluster"], summary["single"]
        ratios = {
            key: round(cluster[key] / single[key], 3) if single[key] else None
            for key in ("rps", "turn_p50_ms", "turn_p95_ms", "turn_p99_ms")
        }
        self.stdout.write(
            f"cluster / single node: throughput x{ratios['rps']}, turn p50 x{ratios['turn_p50_ms']}, "
            f"p95 x{ratios['turn_p95_ms']}, p99 x{ratios['turn_p99_ms']}"
        )
        self.stdout.write(json.dumps({"users": options["users"], **summary, "ratio_cluster_to_single": ratios}))

    def measure(
        self, reporter: LoadtestCommand, base_url: str, plan_path: Path, folder: Path, options: dict[str, Any]
    ) -> dict[str, Any]:
        locust = LocustRun(base_url, plan_path, folder, options["wait"], options["think"])
        if options["warmup"]:
            locust.run("warmup", min(options["users"], 16), options["warmup"], options["spawn_rate"])
        # The machine's speed beside each measured run, as every benchmark here prints it.
        probe_before = cpu_probe_seconds()
        result = locust.run("measured", options["users"], options["duration"], options["spawn_rate"])
        reporter.report(result, options["users"], probe={"before": probe_before, "after": cpu_probe_seconds()})
        return result


def _combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput, errors and turn percentiles over every run of one target (samples pooled)."""
    requests = errors = 0
    elapsed = 0.0
    turns: list[float] = []
    for result in runs:
        samples: dict[str, list[float]] = result["samples"]
        names = [n for n in samples if not (n == "turn" or n.startswith("turn:"))]
        requests += sum(len(samples[n]) for n in names)
        errors += sum(result["errors"].get(n, 0) for n in names) + result["errors"].get("turn", 0)
        elapsed += max(0.001, float(result["stopped"]) - float(result["started"]))
        turns += samples.get("turn", [])
    turns.sort()
    turns = turns or [0.0]
    return {
        "requests": requests,
        "rps": round(requests / elapsed, 1),
        "errors": errors,
        "turns": len(turns),
        "turn_p50_ms": round(percentile(turns, 50), 1),
        "turn_p95_ms": round(percentile(turns, 95), 1),
        "turn_p99_ms": round(percentile(turns, 99), 1),
    }
