"""Load-test the agent runtime API with Locust: many concurrent agents over real HTTP.

``loadtest [--users 50] [--duration 60] [--memories 2000] [--messages 20000] [--agents 10]
[--workers 4] [--threads 2] [--warmup 10] [--seed 1]`` builds, once, a corpus in the tenant
``loadtest``: ``--agents`` agents (the ``bench_recall`` corpus: 40 people, public, workspace, private
and direct conversations, one stating message per memory) sharing ``--memories`` memories and
``--messages`` messages in all, written with bulk SQL, one transaction per agent; agents are named
after the arguments, so a second run with the same arguments reuses them.

It issues one API key per agent, starts gunicorn (``config.wsgi``, ``--workers`` processes of
``--threads`` threads: at most workers x threads database connections, well under PostgreSQL's 100)
on a free 127.0.0.1 port against this process's database, and runs Locust headless as a subprocess
on ``bench/loadtest/locustfile.py`` (see its docstring for the workload): first ``--warmup`` seconds
whose numbers are discarded, then ``--users`` simulated runtimes for ``--duration`` seconds
(``--run-time``; each Locust run is also killed if it overruns by two minutes). Users are dealt
round-robin over the agents.

It prints the throughput, a p50/p95/p99 table per request type and for whole turns (the sum of a
turn's round trips), the error counts and examples, and how many replies the pre-delivery recheck
withheld (a 409 ``reply_withheld``: another runtime of the same agent changed a memory the reply
cited meanwhile, which the spec requires to withhold; these are not errors). The last line is one
JSON object ``{"users", "duration_s", "requests", "rps", "errors", "withheld", "turn_p50_ms",
"turn_p95_ms", "turn_p99_ms", "cpu_s": {"server", "database", "load"}, "cores_busy", "cpu_probe_s":
{"before", "after"}}``. ``cpu_s`` is the CPU time gunicorn (arbiter and workers), the database
server (None when it is remote) and Locust spent over the measured run, and ``cores_busy`` their sum
over that run's wall time as a share of the machine's cores: the load generator shares the cores with
the service, and a share near 1 means requests queue for a core, whatever their own cost. The probe
(``bench/harness/machine.py``) is timed just before the server starts and just after it stops.
gunicorn is stopped whatever happens; the database server is left as it was.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.models import Actor, RuntimeAgent, Tenant
from accounts.services import api_key_create
from bench.harness.corpus import settle
from bench.harness.machine import cpu_probe_seconds
from bench.harness.server import CpuAccount, database_server_pid, served_process, server_env
from bench.harness.stats import percentile
from bench.management.commands.bench_recall import Spec, Statements, build_agent
from bench.management.commands.bench_turn import load_chat
from history.models import Conversation
from memory.models import MemoryEntry
from memory.retrieval.query import content_terms

TENANT_SLUG = "loadtest"
LOCUSTFILE = Path(settings.BASE_DIR) / "bench" / "loadtest" / "locustfile.py"
#: How long a Locust run may overrun its --run-time (spawning, stop timeout, shutdown) before it is killed.
LOCUST_GRACE_S = 120
#: Seconds Locust lets a running task finish once the run time is up.
STOP_TIMEOUT_S = 15
#: Threads a user may be given: the workspace channels and the direct conversations.
WORKSPACE_THREADS = ("general", "engineering")
VOCABULARY_SOURCE = 500
TURN = "TURN"


class LoadSpec(Spec):
    """``agents`` agents sharing ``revisions`` memories and ``messages`` messages in all."""

    name_format = "load-m{revisions}-n{messages}-a{agents}-s{seed}-{index:03d}"


class Command(BaseCommand):
    help = "Build (once) a multi-agent corpus, serve it with gunicorn and load it with Locust."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--users", type=int, default=50, help="Concurrent simulated agent runtimes.")
        parser.add_argument("--duration", type=int, default=60, help="Seconds of measured load.")
        parser.add_argument("--memories", type=int, default=2_000, help="Memories in the corpus, in all.")
        parser.add_argument("--messages", type=int, default=20_000, help="Messages in the corpus, in all.")
        parser.add_argument("--agents", type=int, default=10, help="Agents the corpus and the users share.")
        parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes.")
        parser.add_argument("--threads", type=int, default=2, help="Threads per gunicorn worker.")
        parser.add_argument("--warmup", type=int, default=10, help="Seconds of unmeasured load first (0: none).")
        parser.add_argument("--spawn-rate", type=float, default=10.0, help="Users started per second.")
        parser.add_argument("--wait", default="1,3", help="min,max seconds a user waits between tasks.")
        parser.add_argument("--think", default="0.1,0.4", help="min,max seconds between the steps of a turn.")
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args: Any, **options: Any) -> None:
        spec = LoadSpec(
            revisions=options["memories"], agents=options["agents"], seed=options["seed"], messages=options["messages"]
        )
        if spec.agents < 1 or spec.revisions < spec.agents or spec.messages < spec.revisions:
            raise CommandError("need --agents >= 1, --memories >= --agents and --messages >= --memories")
        if options["users"] < 1 or options["duration"] < 1 or options["workers"] < 1 or options["threads"] < 1:
            raise CommandError("need --users, --duration, --workers and --threads >= 1")
        for name in ("wait", "think"):
            if not _is_range(options[name]):
                raise CommandError(f"--{name} is min,max in seconds")

        started = time.perf_counter()
        agents, built = ensure_corpus(spec)
        self.stdout.write(
            f"corpus {'built' if built else 'reused'} in {time.perf_counter() - started:.1f} s: {spec.agents} agents, "
            f"{spec.revisions} memories, {spec.messages} messages (tenant {TENANT_SLUG})"
        )
        settle()
        plan = build_plan(agents, random.Random(spec.seed))
        probe_before = cpu_probe_seconds()

        with tempfile.TemporaryDirectory(prefix="engram-loadtest-") as scratch:
            folder = Path(scratch)
            plan_path = folder / "plan.json"
            plan_path.write_text(json.dumps(plan))
            with served_process(
                folder,
                workers=options["workers"],
                threads=options["threads"],
                # A keep-alive longer than a user's wait between tasks: with gunicorn's 2 s default the
                # server closes idle connections just as a runtime reuses them, which would count as
                # request errors.
                options=("--timeout", "60", "--keep-alive", "30"),
                env={"ENGRAM_LOG_LEVEL": "WARNING"},
            ) as (base_url, server_pid):
                self.stdout.write(
                    f"gunicorn on {base_url}: {options['workers']} workers x {options['threads']} threads"
                )
                locust = LocustRun(base_url, plan_path, folder, options["wait"], options["think"])
                if options["warmup"]:
                    warm_users = min(options["users"], options["workers"] * options["threads"] * 2)
                    locust.run("warmup", warm_users, options["warmup"], options["spawn_rate"])
                self.stdout.write(f"load: {options['users']} users for {options['duration']} s")
                with CpuAccount(server_pid, database_server_pid()) as cpu:
                    result = locust.run("measured", options["users"], options["duration"], options["spawn_rate"])
        self.report(result, options["users"], probe={"before": probe_before, "after": cpu_probe_seconds()}, cpu=cpu)

    def report(
        self, result: dict[str, Any], users: int, *, probe: dict[str, float], cpu: CpuAccount | None = None
    ) -> None:
        samples: dict[str, list[float]] = result["samples"]
        errors: dict[str, int] = result["errors"]
        withheld = sum(result.get("withheld", {}).values())
        elapsed = max(0.001, float(result["stopped"]) - float(result["started"]))
        turn_names = sorted(name for name in samples if name == "turn" or name.startswith("turn:"))
        request_names = sorted(name for name in samples if name not in turn_names)
        requests_total = sum(len(samples[name]) for name in request_names)
        errors_total = sum(errors.get(name, 0) for name in request_names)
        turn_errors = sum(errors.get(name, 0) for name in turn_names if name == "turn")

        self.stdout.write(
            f"{requests_total} requests in {elapsed:.1f} s: {requests_total / elapsed:.1f} req/s, "
            f"{errors_total} failed requests, {turn_errors} failed turns, "
            f"{withheld} replies withheld by the pre-delivery recheck"
        )
        self.stdout.write(
            f"{'name':<16}{'count':>8}{'errors':>8}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'max ms':>10}"
        )
        for name in [*request_names, *turn_names]:
            values = sorted(samples[name])
            if not values:
                continue
            self.stdout.write(
                f"{name:<16}{len(values):>8}{errors.get(name, 0):>8}{percentile(values, 50):>10.1f}"
                f"{percentile(values, 95):>10.1f}{percentile(values, 99):>10.1f}{values[-1]:>10.1f}"
            )
        for example in result["examples"]:
            self.stdout.write(f"error: {example}")
        if cpu is not None:
            database = "not measured (a remote server)" if cpu.database_s is None else f"{cpu.database_s:.1f} s"
            self.stdout.write(
                f"CPU over the run's {cpu.wall_s:.1f} s: gunicorn {cpu.server_s:.1f} s, database server {database}, "
                f"Locust {cpu.children_s:.1f} s; {cpu.cores_busy:.0%} of {cpu.cores} cores busy"
            )
        self.stdout.write(f"CPU probe: {probe['before']} s before the load, {probe['after']} s after")
        turns = sorted(samples.get("turn", [])) or [0.0]
        self.stdout.write(
            json.dumps(
                {
                    "users": users,
                    "duration_s": round(elapsed, 1),
                    "requests": requests_total,
                    "rps": round(requests_total / elapsed, 1),
                    "errors": errors_total + turn_errors,
                    "withheld": withheld,
                    "turn_p50_ms": round(percentile(turns, 50), 1),
                    "turn_p95_ms": round(percentile(turns, 95), 1),
                    "turn_p99_ms": round(percentile(turns, 99), 1),
                    **(
                        {
                            "cpu_s": {
                                "server": round(cpu.server_s, 1),
                                "database": None if cpu.database_s is None else round(cpu.database_s, 1),
                                "load": round(cpu.children_s, 1),
                            },
                            "cores_busy": round(cpu.cores_busy, 3),
                        }
                        if cpu is not None
                        else {}
                    ),
                    "cpu_probe_s": probe,
                }
            )
        )


def _is_range(value: str) -> bool:
    try:
        low, high = (float(x) for x in value.split(","))
    except ValueError:
        return False
    return 0 <= low <= high


# --------------------------------------------------------------------------------------------------
# corpus and plan
# --------------------------------------------------------------------------------------------------


def ensure_corpus(spec: LoadSpec) -> tuple[list[RuntimeAgent], bool]:
    """The spec's agents, building whichever are missing, each in one transaction (so an agent that
    exists is complete)."""
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Load test"})
    statements = Statements(random.Random(spec.seed))
    agents, built = [], False
    for index in range(spec.agents):
        agent = RuntimeAgent.objects.filter(tenant=tenant, name=spec.agent_name(index)).first()
        if agent is None:
            with transaction.atomic():
                agent = build_agent(tenant, spec, index, statements)
                chat = spec.messages_of(index) - spec.revisions_of(index)
                load_chat(agent, chat, statements, random.Random(spec.seed * 31 + index))
            built = True
        elif MemoryEntry.objects.filter(agent=agent).count() < spec.revisions_of(index):
            raise CommandError(f"agent {agent.name} holds a different corpus; use a fresh database")
        agents.append(agent)
    return agents, built


def build_plan(agents: list[RuntimeAgent], rng: random.Random) -> dict[str, Any]:
    """What the Locust users need, as JSON: per agent a fresh API key, its connector and people,
    the threads users may take (the workspace channels and the direct conversations) and words
    that occur in its memories."""
    entries = []
    for agent in agents:
        people = list(Actor.objects.filter(connector__agent=agent).select_related("connector").order_by("pk"))
        by_id = {p.pk: p for p in people}
        connector = people[0].connector
        threads = []
        for conversation in Conversation.objects.filter(agent=agent).order_by("pk"):
            if conversation.external_thread_id in WORKSPACE_THREADS:
                audience: dict[str, Any] = {"kind": "workspace"}
                requester = rng.choice(people)
            elif conversation.external_thread_id.startswith("dm-"):
                requester = by_id[conversation.audience_readers[0]]
                audience = {"kind": "members", "readers": [requester.external_id]}
            else:
                continue
            threads.append(
                {
                    "external_id": conversation.external_thread_id,
                    "audience": audience,
                    "conversation_id": conversation.pk,
                    "requester": _person(requester),
                }
            )
        bodies = MemoryEntry.objects.filter(agent=agent).order_by("pk").values_list("current_revision__body", flat=True)
        vocabulary = sorted(
            {w for body in bodies[:VOCABULARY_SOURCE] if body for w in content_terms(body) if len(w) > 3}
        )
        entries.append(
            {
                "agent_id": agent.pk,
                "key": api_key_create(agent=agent, label="loadtest").secret,
                "connector": [connector.type, connector.name],
                "people": [_person(p) for p in people],
                "threads": threads,
                "vocabulary": vocabulary or ["update"],
            }
        )
    return {"run": datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"), "agents": entries}


def _person(actor: Actor) -> dict[str, Any]:
    return {"id": actor.pk, "external_id": actor.external_id, "display_name": actor.display_name}


# --------------------------------------------------------------------------------------------------
# the server and the load
# --------------------------------------------------------------------------------------------------


@dataclass
class LocustRun:
    """Headless Locust runs of ``bench/loadtest/locustfile.py`` against one server."""

    base_url: str
    plan_path: Path
    folder: Path
    wait: str
    think: str

    def run(self, label: str, users: int, seconds: int, spawn_rate: float) -> dict[str, Any]:
        """Run Locust for ``seconds`` with ``users`` users; the samples its locustfile recorded."""
        samples_path = self.folder / f"{label}-samples.json"
        log_path = self.folder / f"{label}-locust.log"
        env = {
            **server_env(self.folder / "celery"),
            "ENGRAM_LOADTEST_PLAN": str(self.plan_path),
            "ENGRAM_LOADTEST_SAMPLES": str(samples_path),
            "ENGRAM_LOADTEST_WAIT": self.wait,
            "ENGRAM_LOADTEST_THINK": self.think,
        }
        command = [
            *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"),
            *("--host", self.base_url, "--users", str(users), "--spawn-rate", str(spawn_rate)),
            *("--run-time", f"{seconds}s", "--stop-timeout", str(STOP_TIMEOUT_S), "--loglevel", "WARNING"),
            *("--exit-code-on-error", "0"),
        ]
        with log_path.open("wb") as log:
            try:
                completed = subprocess.run(
                    command,
                    env=env,
                    cwd=self.folder,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=seconds + LOCUST_GRACE_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as error:
                raise CommandError(f"locust ({label}) overran:\n{log_path.read_text()[-4000:]}") from error
        if completed.returncode != 0 or not samples_path.exists():
            raise CommandError(f"locust ({label}) exited with {completed.returncode}:\n{log_path.read_text()[-4000:]}")
        result: dict[str, Any] = json.loads(samples_path.read_text())
        return result
