"""Fault scenarios against the running cluster (``scripts/cluster``); each prints a JSON line and PASS or FAIL.

``eval "$(scripts/cluster env)"; manage.py fault_cluster [replica|worker|redis|leader|etcd|all] [--failovers 3]``

Runtimes (``fault_db_restart``'s clients: ingest, session, turn, a round that remembers and recalls,
ledger, reply) drive turns through haproxy while one part of the cluster fails. Every wait is on state
the cluster reports (Patroni's REST API, etcd's ``/health``, PostgreSQL's own views), never a fixed
sleep:

* ``leader`` (run ``--failovers`` times): the leader's Patroni and every process of its PostgreSQL are
  killed (SIGKILL), as when its machine is lost. The synchronous standby must be promoted by Patroni
  alone; requests may fail only with ``503 database_unavailable`` and ``Retry-After``, only until the new
  leader is in place, then all succeed; every message, memory and reply the server acknowledged is
  still there, checked by id. ``failover_s`` is the time from the kill to the first write the server
  acknowledged after it. Then the old leader's Patroni starts again: it must rejoin as a replica of the
  new leader (``pg_rewind`` when its history diverged), on the new leader's timeline, holding exactly
  the new leader's rows of the agent (no divergent history).
* ``etcd``: one etcd member is killed: no request may fail and the leader must stay; a second one is
  killed: without a quorum the leader must step down (no node accepts writes: no split brain), and
  requests fail only with ``503``; both come back: a leader is elected, every request succeeds again and
  nothing acknowledged is lost.
* ``replica``: the synchronous standby is killed (SIGKILL) and held down until the leader has made the
  other replica synchronous, then starts again. No request may fail (reads fall back to the primary
  without an error to the agent); the replicas must have served reads before, and the killed one must
  stream again afterwards.
* ``worker``: while a worker is embedding (``celery inspect active`` shows ``embed_pending``), the pool
  processes of both workers are killed (SIGKILL). Every text of the agent must then be embedded exactly
  once in every target generation, and the outbox hold nothing pending for it (the outbox and its
  periodic drain, not the broker, guarantee completion).
* ``redis``: the workers stop consuming, writes queue embedding tasks in Redis, and Redis restarts
  (``DEBUG RESTART``: the process is replaced and reloads its append-only file). Every queued task must
  still be there afterwards, and once the workers consume again every text must be embedded.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from accounts.models import RuntimeAgent, Tenant
from accounts.services import api_key_create
from bench.management.commands.fault_db_restart import REQUEST_TIMEOUT_S, Client, check, read_ledgers
from config.celery import app as celery_app
from history.models import Message
from memory.embeddings.index import ensure_generation, target_generations
from memory.models import IndexOutbox, MemoryRevision, MessageEmbedding, RevisionEmbedding

SCENARIOS = ("replica", "worker", "redis", "leader", "etcd")
TENANT_SLUG = "fault-cluster"
#: How long a scenario waits for the cluster to finish recovering (embeddings drained, replica streaming).
SETTLE_S = 180.0
#: How long a promotion or an election may take before the scenario fails (Patroni's ttl is 20 s).
FAILOVER_LIMIT_S = 90.0
WRITE_STEPS = frozenset({"ingest", "session_open", "turn_start", "round", "reply"})


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scenario", nargs="?", default="all", choices=(*SCENARIOS, "all"))
        parser.add_argument("--clients", type=int, default=4)
        parser.add_argument("--before", type=float, default=4.0, help="Seconds of load before the fault.")
        parser.add_argument("--outage", type=float, default=4.0, help="Seconds the workers stay killed.")
        parser.add_argument("--after", type=float, default=8.0, help="Seconds of load after recovery.")
        parser.add_argument("--failovers", type=int, default=3, help="How many times the leader is killed.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.cluster = Cluster.from_environment()
        self.options = options
        scenarios = SCENARIOS if options["scenario"] == "all" else (options["scenario"],)
        failed = []
        failovers: list[float] = []
        for name in scenarios:
            runs = options["failovers"] if name == "leader" else 1
            for run in range(1, runs + 1):
                if not self.cluster.wait_healthy(SETTLE_S):
                    raise CommandError(f"the cluster is not healthy before {name}: {self.cluster.members()}")
                summary, problems = getattr(self, f"scenario_{name}")()
                if name == "leader":
                    summary["run"] = run
                    if summary.get("failover_s") is not None:
                        failovers.append(summary["failover_s"])
                summary["ok"] = not problems
                self.stdout.write(json.dumps({"scenario": name, **summary}, default=str))
                if problems:
                    failed.append(name)
                    self.stdout.write(f"FAIL {name}: " + "; ".join(problems[:20]))
                else:
                    self.stdout.write(f"PASS {name}")
        if failovers:
            self.stdout.write(
                json.dumps(
                    {
                        "failover_s": failovers,
                        "median": round(statistics.median(failovers), 2),
                        "max": round(max(failovers), 2),
                    }
                )
            )
        if failed:
            raise CommandError(f"failed: {', '.join(failed)}")

    # --- scenarios ------------------------------------------------------------------------------

    def scenario_leader(self) -> tuple[dict[str, Any], list[str]]:
        cluster = self.cluster
        agent, secret = new_agent("leader")
        old = cluster.leader()
        events: dict[str, Any] = {"old_leader": old, "sync_standby_before": cluster.role_holder("sync_standby")}
        marks: dict[str, float] = {}

        def fault() -> None:
            close_all()  # this process's connection dies with the leader too
            events["processes_killed"] = cluster.kill_node(old)
            killed_at = marks["killed"] = time.monotonic()
            events["probe_during_failover"] = probe(cluster.url, secret)
            promoted = wait_for(lambda: cluster.leader() not in (None, old), FAILOVER_LIMIT_S)
            events["promoted_s"] = round(time.monotonic() - killed_at, 2) if promoted else None
            events["new_leader"] = cluster.leader()
            events["write_port_s"] = (
                round(time.monotonic() - killed_at, 2) if wait_for(cluster.write_port_on_leader, 30) else None
            )

        clients, down_at, up_at = self.drive(secret, fault)
        close_all()
        summary, problems = check(
            agent, clients, read_ledgers(self.cluster.url, secret, clients), down_at=down_at, up_at=up_at
        )
        events.update(lost_writes(agent, clients))
        # From the moment every process of the leader is dead (a request sent before it may still succeed).
        events["failover_s"] = first_write_after(clients, marks["killed"])
        status, code, retry_after = events["probe_during_failover"]
        if (status, code) != (503, "database_unavailable") or not retry_after:
            problems.append(f"during the failover a request answered {status} {code!r} Retry-After {retry_after!r}")
        if events["promoted_s"] is None:
            problems.append(f"no replica was promoted within {FAILOVER_LIMIT_S:.0f} s")
        elif events["new_leader"] != events["sync_standby_before"]:
            problems.append(f"{events['new_leader']} was promoted, not the synchronous standby")
        if events["acknowledged_lost"]:
            problems.append(f"{events['acknowledged_lost']} acknowledged writes lost")

        # The old leader comes back: it must follow the new one, with the new one's history.
        rejoin = cluster.rejoin(old, events["new_leader"], agent)
        events.update(rejoin)
        if not rejoin["old_leader_rejoined"]:
            problems.append(f"{old} did not rejoin as a streaming replica of {events['new_leader']}")
        elif not rejoin["same_history"]:
            problems.append(f"{old} diverges from the new leader: {rejoin['divergence']}")
        return {**summary, **events}, problems

    def scenario_etcd(self) -> tuple[dict[str, Any], list[str]]:
        cluster = self.cluster
        agent, secret = new_agent("etcd")
        first, second = cluster.etcd[0][0], cluster.etcd[1][0]
        leader = cluster.leader()
        events: dict[str, Any] = {"leader_before": leader, "members_killed": [first, second]}
        marks: dict[str, float] = {}

        def fault() -> None:
            cluster.kill_etcd(first)
            marks["one_lost"] = time.monotonic()
            events["quorum_with_one_lost"] = wait_for(lambda: cluster.etcd_healthy_count() == 2, 30)
            # Nothing visible may happen: the clients go on completing turns, the leader stays.
            done = completed_turns(clients_box[0])
            events["turns_with_one_lost"] = wait_for(
                lambda: completed_turns(clients_box[0]) >= done + 2 * len(clients_box[0]), 60
            )
            events["leader_with_one_lost"] = cluster.leader()
            close_all()
            cluster.kill_etcd(second)
            marks["two_lost"] = time.monotonic()
            # Without a quorum the leader cannot renew its key: it must stop accepting writes.
            stepped_down = wait_for(lambda: cluster.writable_nodes() == [], FAILOVER_LIMIT_S)
            events["stepped_down_s"] = round(time.monotonic() - marks["two_lost"], 2) if stepped_down else None
            events["probe_without_quorum"] = probe(cluster.url, secret)
            cluster.release(first)
            cluster.release(second)
            marks["quorum_back"] = time.monotonic()
            events["etcd_healthy_again"] = wait_for(lambda: cluster.etcd_healthy_count() == 3, 60)
            back = wait_for(lambda: cluster.leader() is not None and cluster.write_port_on_leader(), FAILOVER_LIMIT_S)
            events["service_back_s"] = round(time.monotonic() - marks["quorum_back"], 2) if back else None
            events["leader_after"] = cluster.leader()

        clients_box: list[list[Client]] = []
        clients, down_at, up_at = self.drive(secret, fault, clients_box)
        close_all()
        summary, problems = check(
            agent, clients, read_ledgers(self.cluster.url, secret, clients), down_at=down_at, up_at=up_at
        )
        events.update(lost_writes(agent, clients))
        answers = [a for c in clients for a in c.answers]
        events["failed_with_one_lost"] = sum(
            1 for a in answers if marks["one_lost"] <= a.at < marks["two_lost"] and not 200 <= a.status < 300
        )
        if events["failed_with_one_lost"]:
            problems.append(f"{events['failed_with_one_lost']} requests failed with one etcd member lost")
        if not events["turns_with_one_lost"]:
            problems.append("the runtimes made no progress with one etcd member lost")
        if events["leader_with_one_lost"] != leader:
            problems.append(f"the leader changed with one etcd member lost: {events['leader_with_one_lost']}")
        if events["stepped_down_s"] is None:
            problems.append("with two etcd members lost a node still accepted writes")
        status, code, retry_after = events["probe_without_quorum"]
        if (status, code) != (503, "database_unavailable") or not retry_after:
            problems.append(f"without a quorum a request answered {status} {code!r} Retry-After {retry_after!r}")
        if events["service_back_s"] is None:
            problems.append("no leader after the quorum came back")
        if events["acknowledged_lost"]:
            problems.append(f"{events['acknowledged_lost']} acknowledged writes lost")
        return {**summary, **events}, problems

    def scenario_replica(self) -> tuple[dict[str, Any], list[str]]:
        cluster = self.cluster
        agent, secret = new_agent("replica")
        victim = cluster.role_holder("sync_standby")
        if victim is None:
            raise CommandError(f"no synchronous standby to kill: {cluster.members()}")
        events: dict[str, Any] = {"replica_killed": victim}

        def fault() -> None:
            # The app servers' connections to the replicas: their routed reads (statistics counters would
            # show them too, but a standby's backends publish those only when idle).
            events["app_connections_on_replicas"] = cluster.replica_client_connections()
            events["processes_killed"] = cluster.kill_node(victim)
            events["replica_refused_connections"] = not cluster.node_reachable(victim)
            # Held down until the leader has made the other replica its synchronous standby.
            events["other_replica_made_synchronous"] = wait_for(
                lambda: cluster.role_holder("sync_standby") not in (None, victim), 60
            )
            cluster.release(victim)

        clients, down_at, up_at = self.drive(secret, fault)
        ledgers = read_ledgers(cluster.url, secret, clients)
        summary, problems = check(agent, clients, ledgers, down_at=down_at, up_at=up_at)
        # No outage reaches the agent here: check() expects 503s, and must find none.
        problems = [p for p in problems if not p.startswith("no request met the outage")]
        if summary["database_unavailable_503"] or summary["other_failures"]:
            problems.append("a request failed while the replica was down")
        if not events["app_connections_on_replicas"]:
            problems.append("the replicas served no reads before one was killed: nothing was routed there")
        if not events["replica_refused_connections"]:
            problems.append("the replica still answered after it was killed")
        if not events["other_replica_made_synchronous"]:
            problems.append("the leader did not make the other replica synchronous")
        events["replica_streaming_again"] = wait_for(lambda: cluster.member_state(victim) == "streaming", SETTLE_S)
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

    # --- helpers --------------------------------------------------------------------------------

    def drive(
        self, secret: str, fault: Callable[[], None], box: list[list[Client]] | None = None
    ) -> tuple[list[Client], float, float]:
        """Clients drive turns for ``--before`` seconds, ``fault`` runs (``box`` gets the clients, for a
        fault that watches them), then ``--after`` more seconds."""
        stop = threading.Event()
        options = self.options
        deadline = time.monotonic() + options["before"] + options["after"] + 900
        clients = [Client(n, self.cluster.url, secret, stop, deadline) for n in range(options["clients"])]
        if box is not None:
            box.append(clients)
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


def completed_turns(clients: list[Client]) -> int:
    return sum(len(c.acknowledged.replies) for c in clients)


def first_write_after(clients: list[Client], moment: float) -> float | None:
    """Seconds from ``moment`` to the first write the server acknowledged that was sent after it."""
    done = [
        a.at + a.elapsed_s
        for c in clients
        for a in c.answers
        if a.at >= moment and a.step in WRITE_STEPS and 200 <= a.status < 300
    ]
    return round(min(done) - moment, 2) if done else None


def lost_writes(agent: RuntimeAgent, clients: list[Client]) -> dict[str, int]:
    """Every message, reply and memory the server acknowledged, looked up by id on the leader."""
    messages = {m for c in clients for m in c.acknowledged.messages.values()}
    messages |= {m for c in clients for m in c.acknowledged.replies}
    revisions = {r for c in clients for rs in c.acknowledged.memories.values() for r in rs}
    close_all()
    stored_messages = set(Message.objects.filter(pk__in=messages).values_list("pk", flat=True))
    stored_revisions = set(MemoryRevision.objects.filter(pk__in=revisions).values_list("pk", flat=True))
    return {
        "acknowledged_messages_and_replies": len(messages),
        "acknowledged_memories": len(revisions),
        "acknowledged_lost": len(messages - stored_messages) + len(revisions - stored_revisions),
    }


@dataclass(frozen=True)
class Node:
    name: str
    pg_port: int
    rest_port: int


class Cluster:
    """The parts of the running cluster a scenario kills, holds down, starts and inspects."""

    def __init__(self, url: str, directory: Path, nodes: list[Node], etcd: list[tuple[str, int]]) -> None:
        self.url = url
        self.directory = directory
        self.nodes = {node.name: node for node in nodes}
        self.etcd = etcd
        self.database = str(settings.DATABASES["default"]["NAME"])

    @classmethod
    def from_environment(cls) -> Cluster:
        url = os.environ.get("ENGRAM_CLUSTER_URL", "")
        nodes_spec = os.environ.get("ENGRAM_CLUSTER_NODES", "")
        etcd_spec = os.environ.get("ENGRAM_CLUSTER_ETCD", "")
        directory = Path(os.environ.get("ENGRAM_CLUSTER_DIR", ""))
        if not url or not nodes_spec or not etcd_spec or not settings.CELERY_BROKER_URL.startswith("redis://"):
            raise CommandError('run it against the cluster: eval "$(scripts/cluster env)" first')
        if not (directory / "patroni").is_dir():
            raise CommandError(f"no cluster in {directory}: start it with scripts/cluster")
        nodes = []
        for item in nodes_spec.split(","):
            name, ports = item.split("=")
            pg_port, rest_port = ports.split("/")
            nodes.append(Node(name, int(pg_port), int(rest_port)))
        etcd = [(name, int(port)) for name, port in (item.split("=") for item in etcd_spec.split(","))]
        return cls(url, directory, nodes, etcd)

    # --- what the cluster reports ---------------------------------------------------------------

    def rest(self, name: str, path: str) -> tuple[int, Any]:
        """Patroni's REST API of one node: status and JSON body (0 when it does not answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.nodes[name].rest_port, timeout=2)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            text = response.read()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, None
        except OSError:
            return 0, None
        finally:
            conn.close()

    def members(self) -> list[dict[str, Any]]:
        """Patroni's members as any node that answers sees them (``patronictl list``'s source)."""
        for name in self.nodes:
            status, body = self.rest(name, "/cluster")
            if status == 200 and isinstance(body, dict):
                return list(body.get("members", []))
        return []

    def role_holder(self, role: str) -> str | None:
        return next((m["name"] for m in self.members() if m.get("role") == role), None)

    def member_state(self, name: str) -> str | None:
        return next((m.get("state") for m in self.members() if m["name"] == name), None)

    def leader(self) -> str | None:
        """The node whose Patroni answers 200 on ``/primary`` (the check haproxy routes writes by)."""
        return next((name for name in self.nodes if self.rest(name, "/primary")[0] == 200), None)

    def healthy(self) -> bool:
        roles = sorted((m.get("role"), m.get("state")) for m in self.members())
        quorum = self.etcd_healthy_count() == len(self.etcd)
        return quorum and roles == [("leader", "running"), ("replica", "streaming"), ("sync_standby", "streaming")]

    def wait_healthy(self, timeout: float) -> bool:
        return wait_for(self.healthy, timeout)

    def node_url(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.nodes[name].pg_port}/{self.database}"

    def node_rows(self, name: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.node_url(name), connect_timeout=3, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def node_reachable(self, name: str) -> bool:
        try:
            self.node_rows(name, "SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def writable_nodes(self) -> list[str]:
        """Nodes whose PostgreSQL accepts writes (not in recovery): at most one, ever."""
        writable = []
        for name in self.nodes:
            with contextlib.suppress(psycopg.OperationalError):
                if self.node_rows(name, "SELECT NOT pg_is_in_recovery()")[0][0]:
                    writable.append(name)
        return writable

    def write_port_on_leader(self) -> bool:
        """Whether a new connection to ``DATABASE_URL`` (haproxy's write port) reaches a writable node."""
        try:
            with psycopg.connect(os.environ["DATABASE_URL"], connect_timeout=2, autocommit=True) as conn:
                row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
        except psycopg.OperationalError:
            return False
        return bool(row and row[0])

    def replica_client_connections(self) -> int:
        total = 0
        for member in self.members():
            if member.get("role") in ("replica", "sync_standby"):
                total += int(
                    self.node_rows(
                        member["name"],
                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                        " AND datname = current_database() AND pid <> pg_backend_pid()",
                    )[0][0]
                )
        return total

    def etcd_healthy_count(self) -> int:
        healthy = 0
        for _, port in self.etcd:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                conn.request("GET", "/health")
                if json.loads(conn.getresponse().read()).get("health") == "true":
                    healthy += 1
            except (OSError, ValueError):
                pass
            finally:
                conn.close()
        return healthy

    # --- faults ---------------------------------------------------------------------------------

    def _hold(self, name: str) -> int | None:
        """Keep ``scripts/cluster``'s supervisor from starting ``name`` again; its current pid."""
        (self.directory / "run" / f"{name}.down").touch()
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((self.directory / "run" / f"{name}.pid").read_text())
        return None

    def release(self, name: str) -> None:
        """Let the supervisor start ``name`` again."""
        (self.directory / "run" / f"{name}.down").unlink(missing_ok=True)

    def kill_node(self, name: str | None) -> int:
        """SIGKILL a node's Patroni and every process of its PostgreSQL (held down until released)."""
        if name is None:
            raise CommandError(f"no such node to kill: {self.members()}")
        victims = [pid] if (pid := self._hold(name)) else []
        with contextlib.suppress(FileNotFoundError, ValueError):
            postmaster = int((self.directory / name / "data" / "postmaster.pid").read_text().split()[0])
            victims += [postmaster, *children(postmaster)]
        killed = 0
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
                killed += 1
        return killed

    def kill_etcd(self, name: str) -> None:
        pid = self._hold(name)
        if pid is None:
            raise CommandError(f"no pid for {name}")
        os.kill(pid, signal.SIGKILL)

    def rejoin(self, old: str | None, leader: str | None, agent: RuntimeAgent) -> dict[str, Any]:
        """Start the old leader again; whether it follows ``leader`` and holds exactly its rows."""
        result: dict[str, Any] = {"old_leader_rejoined": False, "same_history": False, "rewound": False}
        if old is None or leader is None:
            return result
        log = self.directory / "log" / f"{old}.log"
        offset = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        self.release(old)

        def following() -> bool:
            members = {m["name"]: m for m in self.members()}
            mine, theirs = members.get(old, {}), members.get(leader, {})
            return (
                mine.get("state") == "streaming"
                and theirs.get("role") == "leader"
                and mine.get("timeline") == theirs.get("timeline")
            )

        result["old_leader_rejoined"] = wait_for(following, SETTLE_S)
        result["rejoin_s"] = round(time.monotonic() - started, 2)
        with contextlib.suppress(OSError), log.open("rb") as handle:
            handle.seek(offset)
            result["rewound"] = b"pg_rewind" in handle.read()
        if not result["old_leader_rejoined"]:
            return result
        # Caught up with the leader's position now, then the agent's rows compared on both nodes.
        position = self.node_rows(leader, "SELECT pg_current_wal_lsn()::text")[0][0]
        wait_for(
            lambda: bool(self.node_rows(old, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (position,))[0][0]), 60
        )
        divergence = {}
        for model in (Message, MemoryRevision):
            sql = f"SELECT id FROM {model._meta.db_table} WHERE agent_id = %s"
            on_leader = {row[0] for row in self.node_rows(leader, sql, (agent.pk,))}
            on_old = {row[0] for row in self.node_rows(old, sql, (agent.pk,))}
            if on_leader != on_old:
                divergence[model._meta.db_table] = {
                    "only_on_old": sorted(on_old - on_leader)[:20],
                    "only_on_leader": sorted(on_leader - on_old)[:20],
                }
        result["same_history"] = not divergence
        result["divergence"] = divergence
        return result

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


def children(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` (a postmaster's backends and auxiliary processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            # Field 4 of /proc/<pid>/stat, after the parenthesised command name.
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found


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
