"""Fault scenario: the database restarts while agents are driving turns over HTTP.

``fault_db_restart [--clients 6] [--before 4] [--outage 4] [--after 8] [--workers 2] [--threads 2]``
runs only on a PRIVATE embedded PostgreSQL: ``ENGRAM_VAR_DIR`` must name a folder other than the
checkout's ``var/`` (which the test suite and ``scripts/run`` use) and ``DATABASE_URL`` must be unset,
because the scenario stops that server. It migrates the database, creates a fresh agent in the
tenant ``fault-db-restart``, starts gunicorn on a free 127.0.0.1 port (with the embedded server's
autostart off, so no worker restarts the database behind the scenario's back) and ``--clients``
threads that each drive turns as a runtime does (ingest, session, turn, a round that remembers and
recalls, ledger, reply), recording every answer.

After ``--before`` seconds it stops the server (a fast shutdown, as an operator's restart does),
keeps it down ``--outage`` seconds, starts it again and lets the clients run ``--after`` more
seconds. Then it checks the contract and prints one JSON summary line; any violation fails the
command:

* no hang: every request got an HTTP answer within ``REQUEST_TIMEOUT_S``;
* clean failures: every unsuccessful answer is 503 with the error body ``{code: "database_unavailable",
  message, detail}`` (at least one must have occurred, or the scenario missed the outage);
* recovery: requests made from ``RECOVERY_GRACE_S`` after the restart all succeed;
* nothing committed is lost: every message, memory and reply the server acknowledged exists, and
  each acknowledged turn's ledger (read through the API) lists the memories it acknowledged;
* no partial writes: every message of the agent has its source evidence (inbound) and its search
  document, every entry a current revision with evidence, every ledger row its revision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from accounts.models import RuntimeAgent, Tenant
from accounts.services import api_key_create
from bench.harness import http_client
from bench.harness.server import served
from config import embedded_postgres
from history.models import Message, MessageDirection, MessageSearchDocument, MessageSourceEvidence
from memory.models import MemoryEntry, MemoryEvidence, MemoryOperation, MemoryRevision

TENANT_SLUG = "fault-db-restart"
REQUEST_TIMEOUT_S = 15.0
#: After the restart, requests made later than this must all succeed.
RECOVERY_GRACE_S = 3.0
#: A client that got an error waits this long before its next turn, as a runtime backs off.
BACKOFF_S = 0.2
PEOPLE = (("U100", "Victor"), ("U200", "Alice"), ("U300", "Bob"))


@dataclass
class Answer:
    at: float
    step: str
    status: int  # 0: no HTTP answer (timeout or connection error)
    elapsed_s: float
    body: Any = None
    error: str = ""


@dataclass
class Acknowledged:
    """What the server said it committed, per client."""

    messages: dict[str, int] = field(default_factory=dict)  # external id -> message id
    memories: dict[int, list[int]] = field(default_factory=dict)  # turn id -> revision ids
    replies: list[int] = field(default_factory=list)


class Client(threading.Thread):
    """One runtime driving turns in its own direct conversation until told to stop."""

    def __init__(self, number: int, base_url: str, secret: str, stop: threading.Event, deadline: float) -> None:
        super().__init__(name=f"fault-client-{number}", daemon=True)
        self.number = number
        self.base_url = base_url
        self.secret = secret
        self.stop = stop
        self.deadline = deadline
        self.answers: list[Answer] = []
        self.acknowledged = Acknowledged()
        self.said = 0
        self.session_id = 0
        self.person = PEOPLE[number % len(PEOPLE)]
        self.thread_id = f"dm-fault-{number}"

    def call(self, method: str, path: str, step: str, body: Any = None) -> Any:
        started = time.monotonic()
        try:
            answer = http_client.call(
                self.base_url, method, path, timeout=REQUEST_TIMEOUT_S, secret=self.secret, body=body
            )
        except http_client.NO_ANSWER as error:
            self.answers.append(Answer(started, step, 0, time.monotonic() - started, error=str(error)[:300]))
            return None
        try:
            data = answer.json()
        except ValueError:
            data = answer.text[:300]
        self.answers.append(Answer(started, step, answer.status, time.monotonic() - started, data))
        return data if 200 <= answer.status < 300 else None

    def run(self) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            if not self.turn():
                time.sleep(BACKOFF_S)

    def turn(self) -> bool:
        """One turn; False at the first failed step (the runtime starts over with a new message)."""
        self.said += 1
        external_id = f"fault-{self.number}-{self.said}"
        message = {
            "connector": {"type": "slack", "name": "fault"},
            "thread": {"external_id": self.thread_id, "audience": {"kind": "members", "readers": [self.person[0]]}},
            "actor": {"external_id": self.person[0], "display_name": self.person[1]},
            "external_id": external_id,
            "body": f"Note {self.said} from client {self.number}: the deploy window is Friday.",
            "created_at": datetime.now(UTC).isoformat(),
            "evidence": {"method": "connector_signed"},
        }
        ingested = self.call("POST", "/api/v1/messages", "ingest", {"messages": [message]})
        if ingested is None:
            return False
        row = ingested["messages"][0]
        self.acknowledged.messages[external_id] = int(row["message_id"])
        if not self.session_id:
            opened = self.call("POST", "/api/v1/sessions", "session_open", {"conversation_id": row["conversation_id"]})
            if opened is None:
                return False
            self.session_id = int(opened["session_id"])
        started = self.call(
            "POST", f"/api/v1/sessions/{self.session_id}/turns", "turn_start", {"inbound_message_id": row["message_id"]}
        )
        if started is None:
            return False
        turn_id = int(started["turn_id"])
        calls = [
            {"verb": "remember", "body": f"Client {self.number} said deploys are on Friday ({self.said})."},
            {"verb": "recall", "query": "deploy window Friday"},
        ]
        ran = self.call("POST", f"/api/v1/turns/{turn_id}/rounds", "round", {"calls": calls})
        if ran is None:
            return False
        remembered = ran["results"][0]
        if remembered["status"] == "ok":
            self.acknowledged.memories[turn_id] = [int(remembered["result"]["revision_id"])]
        if self.call("GET", f"/api/v1/turns/{turn_id}/ledger", "ledger") is None:
            return False
        replied = self.call("POST", f"/api/v1/turns/{turn_id}/reply", "reply", {"body": "Thanks, noted the window."})
        if replied is None:
            return False
        self.acknowledged.replies.append(int(replied["message_id"]))
        return True


class Command(BaseCommand):
    help = "Restart the (private) embedded database under HTTP load and check that nothing is lost or hangs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--clients", type=int, default=6, help="Concurrent runtimes.")
        parser.add_argument("--before", type=float, default=4.0, help="Seconds of load before the stop.")
        parser.add_argument("--outage", type=float, default=4.0, help="Seconds the database stays down.")
        parser.add_argument("--after", type=float, default=8.0, help="Seconds of load after the restart.")
        parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes.")
        parser.add_argument("--threads", type=int, default=2, help="Threads per gunicorn worker.")

    def handle(self, *args: Any, **options: Any) -> None:
        data_dir = refuse_shared_server()
        call_command("migrate", verbosity=0)
        tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Database restart fault"})
        agent = RuntimeAgent.objects.create(tenant=tenant, name=f"fault-{datetime.now(UTC):%Y%m%dT%H%M%S%f}")
        secret = api_key_create(agent=agent, label="fault_db_restart").secret

        with (
            tempfile.TemporaryDirectory(prefix="engram-fault-db-") as scratch,
            served(
                Path(scratch),
                workers=options["workers"],
                threads=options["threads"],
                options=("--timeout", "60"),
                # No web worker may restart the database behind the scenario's back.
                env={"ENGRAM_EMBEDDED_POSTGRES_AUTOSTART": "0", "ENGRAM_LOG_LEVEL": "ERROR"},
            ) as base_url,
        ):
            stop = threading.Event()
            total = options["before"] + options["outage"] + options["after"]
            deadline = time.monotonic() + total + 2 * REQUEST_TIMEOUT_S
            clients = [Client(n, base_url, secret, stop, deadline) for n in range(options["clients"])]
            for client in clients:
                client.start()
            time.sleep(options["before"])
            connection.close()  # this process's own connection would not survive the restart either
            down_at = time.monotonic()
            embedded_postgres.stop(data_dir)
            time.sleep(options["outage"])
            restart(data_dir)
            up_at = time.monotonic()
            time.sleep(options["after"])
            stop.set()
            for client in clients:
                client.join(timeout=REQUEST_TIMEOUT_S + 5)
            if any(client.is_alive() for client in clients):
                raise CommandError("a client did not finish: a request hung")
            ledgers = read_ledgers(base_url, secret, clients)

        summary, problems = check(agent, clients, ledgers, down_at=down_at, up_at=up_at)
        self.stdout.write(json.dumps(summary))
        if problems:
            raise CommandError("the database restart broke the contract:\n" + "\n".join(problems[:50]))


def refuse_shared_server() -> Path:
    """The private embedded server's data folder; refuses any server someone else may be using."""
    if os.environ.get("DATABASE_URL"):
        raise CommandError("fault_db_restart stops its database: run it on the embedded server, without DATABASE_URL")
    shared = (Path(settings.BASE_DIR) / "var").resolve()
    if Path(settings.VAR_DIR).resolve() == shared:
        raise CommandError("set ENGRAM_VAR_DIR to a private folder: the default var/ is shared with tests and runs")
    data_dir = Path(settings.EMBEDDED_POSTGRES_DIR)
    if settings.DATABASES["default"]["HOST"] != str(data_dir):
        # The server put its socket elsewhere (a long path): the web workers, started without autostart,
        # would look for it in the data folder.
        raise CommandError(f"use a shorter ENGRAM_VAR_DIR: the socket is not in {data_dir}")
    return data_dir


def restart(data_dir: Path) -> None:
    """Start the server again in a fresh process (pgserver keeps one handle per process and folder)."""
    subprocess.run(
        [sys.executable, "-m", "config.embedded_postgres", "start"],
        cwd=settings.BASE_DIR,
        env=dict(os.environ),
        check=True,
        capture_output=True,
        timeout=60,
    )


def read_ledgers(base_url: str, secret: str, clients: list[Client]) -> dict[int, list[int]]:
    """Each acknowledged turn's ledger, read back through the API: turn id -> revision ids."""
    ledgers: dict[int, list[int]] = {}
    for client in clients:
        for turn_id in client.acknowledged.memories:
            answer = http_client.call(
                base_url, "GET", f"/api/v1/turns/{turn_id}/ledger", timeout=REQUEST_TIMEOUT_S, secret=secret
            )
            operations = answer.json().get("operations", []) if answer.status == 200 else []
            ledgers[turn_id] = [int(op["id"].split(":")[1], 16) for op in operations if op["id"]]
    return ledgers


def check(
    agent: RuntimeAgent, clients: list[Client], ledgers: dict[int, list[int]], *, down_at: float, up_at: float
) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    answers = [a for c in clients for a in c.answers]
    failed = [a for a in answers if not 200 <= a.status < 300]
    unavailable = 0
    for answer in failed:
        body = answer.body if isinstance(answer.body, dict) else {}
        if answer.status == 503 and body.get("code") == "database_unavailable" and {"message", "detail"} <= set(body):
            unavailable += 1
        else:
            problems.append(f"{answer.step}: {answer.status} {answer.error or answer.body!r}"[:400])
    if not unavailable:
        problems.append("no request met the outage: nothing was tested")
    late = [a for a in answers if a.at >= up_at + RECOVERY_GRACE_S]
    if not late or any(not 200 <= a.status < 300 for a in late):
        problems.append(f"no full recovery: {sum(not 200 <= a.status < 300 for a in late)} of {len(late)} failed")

    acknowledged_messages = {mid for c in clients for mid in c.acknowledged.messages.values()}
    acknowledged_messages |= {mid for c in clients for mid in c.acknowledged.replies}
    stored = set(Message.objects.filter(agent=agent).values_list("pk", flat=True))
    if missing := acknowledged_messages - stored:
        problems.append(f"acknowledged messages lost: {sorted(missing)[:20]}")
    acknowledged_revisions = {rid for c in clients for rids in c.acknowledged.memories.values() for rid in rids}
    revisions = set(MemoryRevision.objects.filter(agent=agent).values_list("pk", flat=True))
    if missing := acknowledged_revisions - revisions:
        problems.append(f"acknowledged memories lost: {sorted(missing)[:20]}")
    for client in clients:
        for turn_id, revision_ids in client.acknowledged.memories.items():
            if not set(revision_ids) <= set(ledgers.get(turn_id, [])):
                problems.append(f"turn {turn_id}: the ledger lacks {revision_ids} (has {ledgers.get(turn_id)})")

    messages = Message.objects.filter(agent=agent)
    inbound = messages.filter(direction=MessageDirection.INBOUND)
    if bare := inbound.exclude(pk__in=MessageSourceEvidence.objects.values("message_id")).count():
        problems.append(f"{bare} inbound messages without source evidence")
    if unindexed := messages.exclude(pk__in=MessageSearchDocument.objects.values("message_id")).count():
        problems.append(f"{unindexed} messages without a search document")
    entries = MemoryEntry.objects.filter(agent=agent)
    if headless := entries.filter(current_revision__isnull=True).count():
        problems.append(f"{headless} memory entries without a current revision")
    revisions_qs = MemoryRevision.objects.filter(agent=agent)
    if unsourced := revisions_qs.exclude(pk__in=MemoryEvidence.objects.values("revision_id")).count():
        problems.append(f"{unsourced} revisions without evidence")
    operations = MemoryOperation.objects.filter(agent=agent)
    if dangling := operations.filter(revision__isnull=True).exclude(kind="forget").count():
        problems.append(f"{dangling} ledger rows without a revision")

    steps: dict[str, dict[str, int]] = {}
    for answer in answers:
        row = steps.setdefault(answer.step, {})
        row[str(answer.status)] = row.get(str(answer.status), 0) + 1
    summary = {
        "requests": len(answers),
        "succeeded": len(answers) - len(failed),
        "database_unavailable_503": unavailable,
        "other_failures": len(failed) - unavailable,
        "max_request_s": round(max((a.elapsed_s for a in answers), default=0.0), 3),
        "outage_s": round(up_at - down_at, 2),
        "requests_after_recovery": len(late),
        "acknowledged_messages": len(acknowledged_messages),
        "acknowledged_memories": len(acknowledged_revisions),
        "steps": steps,
        "ok": not problems,
    }
    return summary, problems
