"""Fault scenarios against the running cluster (``scripts/cluster``); each prints a JSON line and PASS or FAIL.

``eval "$(scripts/cluster env)"; manage.py fault_cluster [replica|worker|redis|primary|all]``

Runtimes (``fault_db_restart``'s clients: ingest, session, turn, a round that remembers and recalls,
ledger, reply) drive turns through haproxy while one part of the cluster fails:

* ``replica``: the streaming replica is stopped (a fast shutdown) and started again. No request may
  fail (reads fall back to the primary without an error to the agent); the replica must have served
  reads before it stopped (its own commit counter rose) and stream again afterwards.
* ``worker``: while a worker is embedding (``celery inspect active`` shows ``embed_pending``), the pool
  processes of both workers are killed (SIGKILL). Every text of the agent must then be embedded exactly
  once in every target generation, and the outbox hold nothing pending for it (the outbox and its
  periodic drain, not the broker, guarantee completion).
* ``redis``: the workers stop consuming, writes queue embedding tasks in Redis, and Redis restarts
  (``DEBUG RESTART``: the process is replaced and reloads its append-only file). Every queued task must
  still be there afterwards, and once the workers consume again every text must be embedded.
* ``primary``: the primary is stopped for a few seconds and started again. Every failed request must
  be ``503 database_unavailable`` with ``Retry-After``, requests after the restart must all succeed, and
  nothing the server acknowledged may be lost (``fault_db_restart``'s checks).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, connections

from accounts.models import RuntimeAgent, Tenant
from accounts.services import api_key_create
from bench.management.commands.fault_db_restart import REQUEST_TIMEOUT_S, Client, check, read_ledgers
from config.celery import app as celery_app
from history.models import Message
from memory.embeddings.index import ensure_generation, target_generations
from memory.models import IndexOutbox, MemoryRevision, MessageEmbedding, RevisionEmbedding

SCENARIOS = ("replica", "worker", "redis", "primary")
TENANT_SLUG = "fault-cluster"
#: How long a scenario waits for the cluster to finish recovering (embeddings drained, replica streaming).
SETTLE_S = 180.0


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scenario", nargs="?", default="all", choices=(*SCENARIOS, "all"))
        parser.add_argument("--clients", type=int, default=4)
        parser.add_argument("--before", type=float, default=4.0, help="Seconds of load before the fault.")
        parser.add_argument("--outage", type=float, default=4.0, help="Seconds the part stays down.")
        parser.add_argument("--after", type=float, default=8.0, help="Seconds of load after it is back.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.cluster = Cluster.from_environment()
        self.options = options
        scenarios = SCENARIOS if options["scenario"] == "all" else (options["scenario"],)
        failed = []
        for name in scenarios:
            summary, problems = getattr(self, f"scenario_{name}")()
            summary["ok"] = not problems
            self.stdout.write(json.dumps({"scenario": name, **summary}, default=str))
            if problems:
                failed.append(name)
                self.stdout.write(f"FAIL {name}: " + "; ".join(problems[:20]))
            else:
                self.stdout.write(f"PASS {name}")
        if failed:
            raise CommandError(f"failed: {', '.join(failed)}")

    # --- scenarios ------------------------------------------------------------------------------

    def scenario_replica(self) -> tuple[dict[str, Any], list[str]]:
        agent, secret = new_agent("replica")
        events: dict[str, Any] = {}

        def fault() -> None:
            # The app servers' connections to the replica: their routed reads (statistics counters would
            # show them too, but a standby's backends publish those only when idle).
            events["app_connections_on_replica"] = self.cluster.replica_client_connections()
            self.cluster.pg_ctl("replica", "stop")
            events["replica_refused_connections"] = not self.cluster.replica_reachable()
            time.sleep(self.options["outage"])
            self.cluster.pg_ctl("replica", "start")

        clients, down_at, up_at = self.drive(secret, fault)
        ledgers = read_ledgers(self.cluster.url, secret, clients)
        summary, problems = check(agent, clients, ledgers, down_at=down_at, up_at=up_at)
        # No outage reaches the agent here: check() expects 503s, and must find none.
        problems = [p for p in problems if not p.startswith("no request met the outage")]
        if summary["database_unavailable_503"] or summary["other_failures"]:
            problems.append("a request failed while the replica was down")
        if not events["app_connections_on_replica"]:
            problems.append("the replica served no reads before it stopped: nothing was routed there")
        if not events["replica_refused_connections"]:
            problems.append("the replica still answered after it was stopped")
        events["replica_streaming_again"] = wait_for(self.cluster.replica_streaming, SETTLE_S)
        if not events["replica_streaming_again"]:
            problems.append("the replica did not stream again after its restart")
        return {**summary, **events}, problems

    def scenario_worker(self) -> tuple[dict[str, Any], list[str]]:
        ensure_generation()
        agent, secret = new_agent("worker")
        events: dict[str, Any] = {}

        def fault() -> None:
            # Enough texts that embedding them takes a while; then kill the pool while it embeds.
            self.cluster.ingest_burst(secret, "worker", 200)
            killed, mid_task = self.cluster.kill_pools_mid_embedding(timeout=60.0)
            events.update(pool_processes_killed=killed, killed_mid_embedding=mid_task)
            time.sleep(self.options["outage"])

        clients, down_at, up_at = self.drive(secret, fault)
        summary, problems = check(
            agent, clients, read_ledgers(self.cluster.url, secret, clients), down_at=down_at, up_at=up_at
        )
        problems = [p for p in problems if not p.startswith("no request met the outage")]
        if summary["database_unavailable_503"] or summary["other_failures"]:
            problems.append("a request failed while the workers were killed")
        if not events["killed_mid_embedding"]:
            problems.append("no worker was caught embedding: nothing was tested")
        embedded = embeddings_complete(agent)
        problems += embedded.pop("problems")
        events.update(embedded)
        return {**summary, **events}, problems

    def scenario_redis(self) -> tuple[dict[str, Any], list[str]]:
        ensure_generation()
        agent, secret = new_agent("redis")
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        events: dict[str, Any] = {}
        celery_app.control.cancel_consumer("celery", reply=True, timeout=5)
        try:
            self.cluster.ingest_burst(secret, "redis", 50)
            wait_for(lambda: broker.llen("celery") > 0, 30)
            events["queued_before_restart"] = queued = broker.llen("celery")
            run_id = broker.info("server")["run_id"]
            with contextlib.suppress(redis.exceptions.ConnectionError):
                broker.execute_command("DEBUG", "RESTART")  # closes every connection as it restarts
            events["redis_back"] = wait_for(lambda: _ping(broker), 60)
            # A new run id: a new server process, whose state came from the append-only file alone.
            events["redis_restarted"] = events["redis_back"] and broker.info("server")["run_id"] != run_id
            events["queued_after_restart"] = broker.llen("celery") if events["redis_back"] else None
        finally:
            events["workers_consuming_again"] = wait_for(_resume_consuming, 60)
        problems: list[str] = []
        if not events["workers_consuming_again"]:
            problems.append("the workers did not consume again")
        if not events["redis_restarted"]:
            problems.append("Redis did not restart")
        if not queued:
            problems.append("no task was queued before the restart: nothing was tested")
        if events["queued_after_restart"] != queued:
            problems.append(f"{queued} tasks were queued before the restart, {events['queued_after_restart']} after")
        events["queue_drained"] = wait_for(lambda: broker.llen("celery") == 0, SETTLE_S)
        embedded = embeddings_complete(agent)
        problems += embedded.pop("problems")
        events.update(embedded)
        return events, problems

    def scenario_primary(self) -> tuple[dict[str, Any], list[str]]:
        agent, secret = new_agent("primary")
        events: dict[str, Any] = {}

        def fault() -> None:
            connection.close()  # this process's connection does not survive the restart either
            self.cluster.pg_ctl("primary", "stop")
            events["probe_during_outage"] = probe(self.cluster.url, secret)
            time.sleep(self.options["outage"])
            self.cluster.pg_ctl("primary", "start")

        clients, down_at, up_at = self.drive(secret, fault)
        close_all()
        summary, problems = check(
            agent, clients, read_ledgers(self.cluster.url, secret, clients), down_at=down_at, up_at=up_at
        )
        status, code, retry_after = events["probe_during_outage"]
        if (status, code) != (503, "database_unavailable") or not retry_after:
            problems.append(f"during the outage a request answered {status} {code!r} Retry-After {retry_after!r}")
        events["replica_streaming_again"] = wait_for(self.cluster.replica_streaming, SETTLE_S)
        if not events["replica_streaming_again"]:
            problems.append("the replica did not follow the restarted primary")
        return {**summary, **events}, problems

    # --- helpers --------------------------------------------------------------------------------

    def drive(self, secret: str, fault: Callable[[], None]) -> tuple[list[Client], float, float]:
        """Clients drive turns for ``--before`` seconds, ``fault`` runs, then ``--after`` more seconds."""
        stop = threading.Event()
        options = self.options
        deadline = time.monotonic() + options["before"] + options["outage"] + options["after"] + 600
        clients = [Client(n, self.cluster.url, secret, stop, deadline) for n in range(options["clients"])]
        for client in clients:
            client.start()
        time.sleep(options["before"])
        down_at = time.monotonic()
        fault()
        up_at = time.monotonic()
        time.sleep(options["after"])
        stop.set()
        for client in clients:
            client.join(timeout=REQUEST_TIMEOUT_S + 5)
        if any(client.is_alive() for client in clients):
            raise CommandError("a client did not finish: a request hung")
        return clients, down_at, up_at


class Cluster:
    """The parts of the running cluster a scenario stops, starts, kills and inspects."""

    def __init__(self, url: str, directory: Path, replica_url: str) -> None:
        self.url = url
        self.directory = directory
        self.replica_url = replica_url

    @classmethod
    def from_environment(cls) -> Cluster:
        url = os.environ.get("ENGRAM_CLUSTER_URL", "")
        replica_url = os.environ.get("DATABASE_REPLICA_URL", "")
        if not url or not replica_url or not settings.CELERY_BROKER_URL.startswith("redis://"):
            raise CommandError('run it against the cluster: eval "$(scripts/cluster env)" first')
        directory = Path(os.environ.get("ENGRAM_CLUSTER_DIR", Path(settings.BASE_DIR) / "var" / "cluster"))
        if not (directory / "replica" / "PG_VERSION").exists():
            raise CommandError(f"no cluster in {directory}: start it with scripts/cluster")
        return cls(url, directory, replica_url)

    def pg_ctl(self, part: str, action: str) -> None:
        import pgserver

        pg_ctl = str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_ctl")
        command = [pg_ctl, "-D", str(self.directory / part), "-w", "-t", "60", action]
        if action == "stop":
            command += ["-m", "fast"]
        else:
            command += ["-l", str(self.directory / "log" / f"{part}.log")]
        if os.geteuid() == 0:  # PostgreSQL runs as the pgserver user (see scripts/cluster)
            command = ["runuser", "-u", "pgserver", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=90)

    def _replica_value(self, sql: str) -> Any:
        with psycopg.connect(self.replica_url, connect_timeout=3, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
        return row[0] if row else None

    def replica_client_connections(self) -> int:
        return int(
            self._replica_value(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND datname = current_database() AND pid <> pg_backend_pid()"
            )
        )

    def replica_reachable(self) -> bool:
        try:
            self._replica_value("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def replica_streaming(self) -> bool:
        try:
            return bool(self._replica_value("SELECT count(*) = 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'"))
        except psycopg.OperationalError:
            return False

    def ingest_burst(self, secret: str, name: str, count: int) -> None:
        """``count`` messages in one ingest call (each one an outbox row and an embedding to compute)."""
        now = datetime.now(UTC).isoformat()
        messages = [
            {
                "connector": {"type": "slack", "name": "fault"},
                "thread": {"external_id": f"burst-{name}", "audience": {"kind": "workspace"}},
                "actor": {"external_id": "U900", "display_name": "Burst"},
                "external_id": f"burst-{name}-{n}",
                "body": f"Burst note {n}: the staging database moves to the new rack on Thursday {n % 7}.",
                "created_at": now,
                "evidence": {"method": "connector_signed"},
            }
            for n in range(count)
        ]
        status, body, _ = request(self.url, "POST", "/api/v1/messages", secret, {"messages": messages}, timeout=180)
        if status not in (200, 201):
            raise CommandError(f"the burst was refused: {status} {body!r}"[:400])

    def kill_pools_mid_embedding(self, timeout: float) -> tuple[int, bool]:
        """SIGKILL the pool processes of every worker as soon as one of them runs ``embed_pending``."""
        inspect = celery_app.control.inspect(timeout=2)
        deadline = time.monotonic() + timeout
        mid_task = False
        while time.monotonic() < deadline:
            active = inspect.active() or {}
            if any(t.get("name") == "memory.tasks.embed_pending" for tasks in active.values() for t in tasks):
                mid_task = True
                break
            time.sleep(0.2)
        stats = inspect.stats() or {}
        killed = 0
        for worker in stats.values():
            for pid in worker.get("pool", {}).get("processes", []):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed, mid_task


def new_agent(scenario: str) -> tuple[RuntimeAgent, str]:
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Cluster faults"})
    agent = RuntimeAgent.objects.create(tenant=tenant, name=f"{scenario}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}")
    return agent, api_key_create(agent=agent, label=f"fault_cluster {scenario}").secret


def embeddings_complete(agent: RuntimeAgent) -> dict[str, Any]:
    """Whether every text of ``agent`` is embedded exactly once per target generation, waiting for the
    outbox to drain (the periodic drain runs every 30 s)."""
    generations = [g.pk for g in target_generations()]
    revisions = MemoryRevision.objects.filter(agent=agent)
    messages = Message.objects.filter(agent=agent)

    def pending() -> int:
        close_all()
        return IndexOutbox.objects.filter(processed_at__isnull=True).count()

    drained = wait_for(lambda: pending() == 0, SETTLE_S)
    problems: list[str] = []
    counts: dict[str, Any] = {"outbox_drained": drained, "generations": generations}
    for label, rows, model, key in (
        ("revisions", revisions, RevisionEmbedding, "revision_id"),
        ("messages", messages, MessageEmbedding, "message_id"),
    ):
        ids = set(rows.values_list("pk", flat=True))
        for generation in generations:
            embedded = list(
                model.objects.filter(generation_id=generation, **{f"{key}__in": ids}).values_list(key, flat=True)
            )
            twice = len(embedded) - len(set(embedded))
            missing = len(ids - set(embedded))
            counts[f"{label}_g{generation}"] = {"texts": len(ids), "embedded": len(set(embedded)), "twice": twice}
            if missing or twice:
                problems.append(f"generation {generation}: {missing} {label} never embedded, {twice} embedded twice")
    if not drained:
        problems.append("the outbox did not drain")
    if not generations:
        problems.append("no target generation: nothing was embedded")
    return {**counts, "problems": problems}


def request(
    base_url: str, method: str, path: str, secret: str, body: Any = None, timeout: float = REQUEST_TIMEOUT_S
) -> tuple[int, Any, dict[str, str]]:
    address = urlsplit(base_url)
    conn = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=timeout)
    headers = {"Accept": "application/json", "Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
        try:
            data = json.loads(text)
        except ValueError:
            data = text[:300]
        return response.status, data, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


def probe(base_url: str, secret: str) -> tuple[int, str, str]:
    """One request while the primary is down: its status, error code and Retry-After header."""
    status, body, headers = request(base_url, "GET", "/api/v1/turns/1/ledger", secret)
    return status, body.get("code", "") if isinstance(body, dict) else "", headers.get("retry-after", "")


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:  # a part still restarting: ask again
            close_all()
        time.sleep(0.5)
    return False


def close_all() -> None:
    for conn in connections.all():
        conn.close()


def _ping(broker: redis.Redis) -> bool:
    try:
        return bool(broker.ping())
    except redis.exceptions.ConnectionError:
        return False


def _resume_consuming() -> bool:
    """Tell both workers to consume again, on a fresh broker connection (the pooled ones died with Redis)."""
    with celery_app.connection_for_write() as conn:
        replies = celery_app.control.add_consumer("celery", connection=conn, reply=True, timeout=5)
    return len(replies or []) >= 2
