"""Benchmark whole agent turns over real HTTP.

``bench_turn [--memories N] [--messages M] [--turns T] [--seed S] [--warmup W]`` builds, once, one agent
in the tenant ``bench-turn`` with N single-revision memories and M messages (the corpus of
``bench_recall``: one stating message per memory, the rest plain chat spread over the same
conversations), all written with bulk SQL in one transaction; the agent is named after (N, M, S), so a
second run with the same arguments finds and reuses it.

It then issues an API key, starts gunicorn (``config.wsgi``, two sync workers, as ``scripts/run`` does)
on a free loopback port against the same database (the name in ``settings.DATABASES``, so a test
database too), and drives T turns through HTTP with the standard library's client
(:mod:`bench.harness.http_client`), each as a runtime would:

1. ``ingest``: POST /api/v1/messages with the inbound message;
2. ``turn_start``: POST /api/v1/sessions/{id}/turns, loading the conversation's last five messages;
3. ``round``: POST /api/v1/turns/{id}/rounds with one ``recall`` and one ``search_history`` call;
4. ``ledger``: GET /api/v1/turns/{id}/ledger;
5. ``reply``: POST /api/v1/turns/{id}/reply, citing the first recalled memory.

The turns are spread over many conversations, as real agents' are: one conversation per room of the
corpus (public and workspace channels, private channels, direct messages) is open at a time, each turn
arrives in one of them at random, and a conversation that has had C turns (``--per-conversation``)
ends; the next one in that room is a new thread with the room's audience. A runtime opens one session
per conversation, on its first turn; opening it is not part of the turn. A conversation's replies cite
its earlier replies (they are in the loaded window), so its replies' lineage grows with its length;
keeping conversations to a realistic length keeps a run of any length measuring turns rather than
the lineage cap (5,000 nodes, overflow denies), which one endless conversation reaches after some
hundreds of turns. Search hits carry lineage across conversations, so a corpus reused by many runs can
still reach it: a reply the pre-delivery recheck withholds (409 ``reply_withheld``) ends its turn, is
timed like the others and is counted (``withheld``); any other unexpected answer stops the run.

The whole turn is the runtime's part, steps 2-5 (start, the round, the ledger, the reply): ingesting the
inbound message is the connector's, which posts it before the runtime starts the turn, and is timed as
a step of its own and, with the turn, as ``with_ingest``.

W unmeasured turns warm the workers first. It prints a p50/p95 table per step, for the whole turn and
for the turn with ingest, and the CPU time a turn (ingest included) cost gunicorn (arbiter and workers)
and the database server (its postmaster and backends, when it runs on this machine); the last line is
one JSON object: ``{"turns", "conversations", "withheld", "p50_ms", "p95_ms", "with_ingest": {"p50_ms",
"p95_ms"}, "steps": {step: {"p50_ms", "p95_ms"}}, "cpu_ms_per_turn": {"server", "database"},
"cpu_probe_s": {"before", "after"}}``: the probe (``bench/harness/machine.py``) times a fixed Python loop
just before and after the turns, so that runs on a machine whose speed drifts can be compared.
The server is stopped whatever happens.

``--via-client`` times the same turns through the Python client (``engram_client``, with its typed
results and error handling) beside raw HTTP, on one server, in alternate blocks of ten turns; the table
is raw HTTP's and the JSON's ``client`` holds the client's figures and ``p95_ratio`` (client p95 over raw).

``--clients python,typescript`` (any two or three of ``http``, ``python`` and ``typescript``) does the
same for the runtimes it names, on one server, taking blocks of ten turns in turn (which goes first
rotates): the same script, turn count and seed for all. ``typescript`` is the TypeScript client
(``clients/typescript``, built first if it is out of date) in one Node process
(``clients/typescript/bench/runtime.mjs``) that takes each step as a JSON line and answers its result and
the step's wall time, measured in Node around the awaited client call (as the Python client's steps are
timed in this process). The table and the JSON's top-level figures are the first runtime's; ``clients``
holds each one's figures and ``p95_ratios`` each other's p95 over the first's.

``--against PATH`` compares this code with another checkout of Engram at PATH (sharing this one's
migrations, run with this interpreter): each is served by its own gunicorn on the same corpus, and they
take blocks of ten turns in turn, so that a drift of the machine's speed falls on both alike. The table
and the JSON's top-level figures are this code's; ``against`` holds the other's (``code``, ``turns``,
the latencies and ``cpu_ms_per_turn``).

``--vectors`` embeds the corpus (its memories and messages, in the live generation) before the turns, so
that their recalls and searches run the semantic arms, and recall's source arm, which ranks the messages
memories were learned from by their meaning too and runs only where vectors exist. Embedding 110,000
texts takes minutes; a reused corpus keeps its vectors.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pgtrigger
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Count

from accounts.models import Actor, RuntimeAgent, Tenant
from accounts.services import api_key_create
from bench.harness import http_client
from bench.harness.corpus import EMBEDDING_TABLES, settle
from bench.harness.machine import cpu_probe_seconds
from bench.harness.server import CpuAccount, database_server_pid, served_process
from bench.harness.stats import percentile
from bench.harness.typescript_client import ClientUnavailable, RuntimeFailed, TypeScriptRuntime
from bench.management.commands.bench_embed import embed_corpus
from bench.management.commands.bench_recall import CORPUS_EPOCH, NO_INDEX_WORK, Spec, Statements, build_agent
from bench.management.commands.bench_semantic import embed_messages
from history.models import Conversation, Message, MessageDirection
from memory.models import MemoryEntry
from memory.retrieval.query import content_terms

TENANT_SLUG = "bench-turn"
STEPS = ("ingest", "turn_start", "round", "ledger", "reply")
#: The whole turn: what the runtime does once the connector has ingested the inbound message.
TURN_STEPS = STEPS[1:]
#: Turns a simulated conversation runs before it ends and the next one in its room begins.
PER_CONVERSATION = 20
#: Messages of its conversation a runtime loads into the prompt at the start of a turn.
LOADED_WINDOW = 5
REQUEST_TIMEOUT = 60.0
QUESTIONS = (
    "What do you remember about {words}?",
    "Remind me what we said about {words}.",
    "Anything on {words} I should know?",
    "Didn't someone mention {words} recently?",
)


class TurnSpec(Spec):
    """One agent with ``revisions`` memories and ``messages`` messages in all."""

    name_format = "bench-turn-m{revisions}-n{messages}-s{seed}"


class Command(BaseCommand):
    help = "Build (once) an agent with a large memory and history, then time whole turns over real HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--memories", type=int, default=10_000, help="Memories of the agent.")
        parser.add_argument("--messages", type=int, default=100_000, help="Messages of the agent, in all.")
        parser.add_argument("--turns", type=int, default=200, help="Measured turns.")
        parser.add_argument("--warmup", type=int, default=10, help="Unmeasured turns run first.")
        parser.add_argument(
            "--per-conversation", type=int, default=PER_CONVERSATION, help="Turns a conversation runs before it ends."
        )
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--via-client",
            action="store_true",
            help="Time the same turns through the Python client (engram_client) beside raw HTTP, on one server, "
            "in alternate blocks of ten turns; report the client's p95 over raw HTTP's.",
        )
        parser.add_argument(
            "--clients",
            type=runtime_names,
            help="Two or three of http, python and typescript, comma-separated: time the same turns through each "
            "on one server, in rotating blocks of ten turns; report each p95 and each p95 over the first's.",
        )
        parser.add_argument(
            "--vectors",
            action="store_true",
            help="Give the corpus's memories and messages vectors of the live generation first, so that the "
            "turns' recalls run the semantic arms (and recall's source arm, which needs them).",
        )
        parser.add_argument(
            "--against",
            type=Path,
            help="Another checkout of Engram (same migrations) to compare with, free of the machine's drift: "
            "both are served on the same corpus and take blocks of ten turns in turn.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["memories"] < 1 or options["messages"] < options["memories"] or options["turns"] < 1:
            raise CommandError("need --memories >= 1, --messages >= --memories and --turns >= 1")
        if options["per_conversation"] < 1:
            raise CommandError("need --per-conversation >= 1")
        if sum(bool(options[name]) for name in ("against", "via_client", "clients")) > 1:
            raise CommandError("--against, --via-client and --clients compare different things; give one")
        if options["against"] is not None and not (options["against"] / "config" / "wsgi.py").is_file():
            raise CommandError(f"--against {options['against']}: not a checkout of Engram (no config/wsgi.py)")
        spec = TurnSpec(revisions=options["memories"], agents=1, seed=options["seed"], messages=options["messages"])
        started = time.perf_counter()
        agent, built = ensure_agent(spec)
        seconds = time.perf_counter() - started
        self.stdout.write(
            f"corpus {'built' if built else 'reused'} in {seconds:.1f} s: agent {agent.name}, "
            f"{spec.revisions} memories, {spec.messages} messages"
        )
        settle()
        if options["vectors"]:
            embed_corpus([agent], self.stdout.write)
            embed_messages([agent])
            settle(EMBEDDING_TABLES)

        rng = random.Random(spec.seed * 7919 + options["turns"])
        script = Script.load(agent, rng, per_conversation=options["per_conversation"])
        probe_before = cpu_probe_seconds()
        against: Batch | None = None
        via_client: Batch | None = None
        compared: dict[str, Batch] = {}
        if options["via_client"]:
            batch, via_client = drive_via_client(agent, script, turns=options["turns"], warmup=options["warmup"])
        elif options["clients"]:
            batches = drive_runtimes(
                agent, script, options["clients"], turns=options["turns"], warmup=options["warmup"]
            )
            compared = dict(zip(options["clients"], batches, strict=True))
            batch = batches[0]
        elif options["against"] is not None:
            batch, against = drive_pair(
                agent, script, turns=options["turns"], warmup=options["warmup"], other=options["against"].resolve()
            )
        else:
            (batch,) = drive_turns(agent, script, batches=[options["turns"]], warmup=options["warmup"])
        probe = {"before": probe_before, "after": cpu_probe_seconds()}
        timings = batch.timings
        figures = turn_figures(timings)
        self.stdout.write(
            f"{len(timings)} turns over {script.conversations} conversations "
            f"(at most {options['per_conversation']} turns each, warm-up included)"
        )
        self.stdout.write(f"{'step':<12}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        rows = {step: [t[step] for t in timings] for step in STEPS}
        rows["turn"] = [whole_turn(t) for t in timings]
        rows["+ ingest"] = [sum(t.values()) for t in timings]
        for name, values in rows.items():
            values = sorted(values)
            self.stdout.write(
                f"{name:<12}{percentile(values, 50):>10.2f}{percentile(values, 95):>10.2f}{values[-1]:>10.2f}"
            )
        database = "not measured (a remote server)" if batch.database_cpu_ms is None else f"{batch.database_cpu_ms} ms"
        self.stdout.write(f"CPU a turn: gunicorn {batch.server_cpu_ms} ms, database server {database}")
        self.stdout.write(f"CPU probe: {probe['before']} s before the turns, {probe['after']} s after")
        if script.withheld:
            self.stdout.write(f"replies withheld by the pre-delivery recheck: {script.withheld}")
        result = {"turns": len(timings), "conversations": script.conversations, "withheld": script.withheld, **figures}
        result["cpu_ms_per_turn"] = {"server": batch.server_cpu_ms, "database": batch.database_cpu_ms}
        if against is not None:
            other = {"code": str(options["against"]), "turns": len(against.timings), **turn_figures(against.timings)}
            other["cpu_ms_per_turn"] = {"server": against.server_cpu_ms, "database": against.database_cpu_ms}
            self.stdout.write(
                f"{options['against']}, in alternate blocks of {COMPARISON_BLOCK} turns: turn p50 {other['p50_ms']}"
                f" ms, p95 {other['p95_ms']} ms; CPU a turn: gunicorn {against.server_cpu_ms} ms, database server "
                f"{against.database_cpu_ms} ms"
            )
            result["against"] = other
        if via_client is not None:
            client = {"turns": len(via_client.timings), **turn_figures(via_client.timings)}
            client["cpu_ms_per_turn"] = {"server": via_client.server_cpu_ms, "database": via_client.database_cpu_ms}
            client["p95_ratio"] = round(client["p95_ms"] / figures["p95_ms"], 3)
            self.stdout.write(
                f"through engram_client, in alternate blocks of {COMPARISON_BLOCK} turns: turn p50 "
                f"{client['p50_ms']} ms, p95 {client['p95_ms']} ms; client p95 / raw HTTP p95 = {client['p95_ratio']}"
            )
            result["client"] = client
        if compared:
            first = options["clients"][0]
            result["clients"] = {}
            for name, runtime_batch in compared.items():
                figures_of = {"turns": len(runtime_batch.timings), **turn_figures(runtime_batch.timings)}
                figures_of["cpu_ms_per_turn"] = {
                    "server": runtime_batch.server_cpu_ms,
                    "database": runtime_batch.database_cpu_ms,
                }
                result["clients"][name] = figures_of
            result["p95_ratios"] = {
                name: round(result["clients"][name]["p95_ms"] / figures["p95_ms"], 3) for name in options["clients"][1:]
            }
            self.stdout.write(f"the table is {RUNTIMES[first]}'s; in rotating blocks of {COMPARISON_BLOCK} turns:")
            for name, figures_of in result["clients"].items():
                ratio = "" if name == first else f"; p95 / {first}'s = {result['p95_ratios'][name]}"
                self.stdout.write(
                    f"  {name:<11} turn p50 {figures_of['p50_ms']} ms, p95 {figures_of['p95_ms']} ms{ratio}"
                )
        result["cpu_probe_s"] = probe
        self.stdout.write(json.dumps(result))


@dataclass(frozen=True)
class Batch:
    """One batch of measured turns: each turn's step times, and the CPU the servers spent per turn."""

    timings: list[dict[str, float]]
    #: gunicorn's arbiter and workers, in ms per turn.
    server_cpu_ms: float
    #: The database server's processes, in ms per turn (None when it runs on another machine).
    database_cpu_ms: float | None


def drive_turns(agent: RuntimeAgent, script: Script, *, batches: list[int], warmup: int) -> list[Batch]:
    """Serve the API and run ``warmup`` unmeasured turns, then each batch of turns: each turn's step
    times and the CPU time gunicorn and the database server used over the batch (the client, this
    process, is not counted)."""
    secret = api_key_create(agent=agent, label="bench_turn").secret
    database_pid = database_server_pid()
    measured = []
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as folder, served_process(Path(folder)) as served:
        base_url, server_pid = served
        client = Client(base_url, secret)
        for _ in range(warmup):
            script.turn(client)
        for turns in batches:
            with CpuAccount(server_pid, database_pid) as cpu:
                timings = [script.turn(client) for _ in range(turns)]
            database_ms = None if cpu.database_s is None else round(cpu.database_s * 1000 / turns, 1)
            measured.append(Batch(timings, round(cpu.server_s * 1000 / turns, 1), database_ms))
    return measured


#: Turns each server takes in turn when two codes are compared.
COMPARISON_BLOCK = 10


def drive_pair(agent: RuntimeAgent, script: Script, *, turns: int, warmup: int, other: Path) -> tuple[Batch, Batch]:
    """This code and the checkout at ``other``, each served by its own gunicorn on the same corpus, taking
    blocks of :data:`COMPARISON_BLOCK` turns in turn (which goes first alternates), ``turns`` each after
    ``warmup`` each: a drift of the machine's speed falls on both alike. Each batch's CPU is summed over
    its own blocks, the database server's included."""
    secret = api_key_create(agent=agent, label="bench_turn").secret
    database_pid = database_server_pid()
    timings: tuple[list[dict[str, float]], list[dict[str, float]]] = ([], [])
    server_s, database_s = [0.0, 0.0], [0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as folder, ExitStack() as stack:
        clients, pids = [], []
        for name, code in (("this", None), ("other", other)):
            (Path(folder) / name).mkdir()
            base_url, pid = stack.enter_context(served_process(Path(folder) / name, code=code))
            clients.append(Client(base_url, secret))
            pids.append(pid)
        for client in clients:
            for _ in range(warmup):
                script.turn(client)
        for block in range(-(-turns // COMPARISON_BLOCK)):
            for side in (0, 1) if block % 2 == 0 else (1, 0):
                count = min(COMPARISON_BLOCK, turns - block * COMPARISON_BLOCK)
                with CpuAccount(pids[side], database_pid) as cpu:
                    timings[side].extend(script.turn(clients[side]) for _ in range(count))
                server_s[side] += cpu.server_s
                database_s[side] += cpu.database_s or 0.0

    def batch(side: int) -> Batch:
        count = len(timings[side])
        database_ms = round(database_s[side] * 1000 / count, 1) if database_pid else None
        return Batch(timings[side], round(server_s[side] * 1000 / count, 1), database_ms)

    return batch(0), batch(1)


def drive_via_client(agent: RuntimeAgent, script: Script, *, turns: int, warmup: int) -> tuple[Batch, Batch]:
    """Raw HTTP (:class:`Client`) and the Python client (:class:`ClientRuntime`) on one gunicorn (see
    :func:`drive_runtimes`)."""
    raw, client = drive_runtimes(agent, script, ["http", "python"], turns=turns, warmup=warmup)
    return raw, client


#: The runtimes ``--clients`` may name, and what each is called in the report.
RUNTIMES = {"http": "raw HTTP", "python": "the Python client", "typescript": "the TypeScript client"}


def runtime_names(value: str) -> list[str]:
    """``--clients``: two or three distinct names of :data:`RUNTIMES`, in the order given."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in RUNTIMES]
    if unknown or len(names) < 2 or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give two or three distinct runtimes among {', '.join(RUNTIMES)}, comma-separated"
        )
    return names


def open_runtime(name: str, base_url: str, secret: str) -> Client | ClientRuntime | TypeScriptClientRuntime:
    if name == "python":
        return ClientRuntime(base_url, secret)
    if name == "typescript":
        try:
            return TypeScriptClientRuntime(base_url, secret)
        except ClientUnavailable as missing:
            raise CommandError(f"--clients typescript: {missing}") from missing
    return Client(base_url, secret)


def drive_runtimes(agent: RuntimeAgent, script: Script, names: list[str], *, turns: int, warmup: int) -> list[Batch]:
    """The runtimes ``names`` (:data:`RUNTIMES`) on one gunicorn, taking blocks of :data:`COMPARISON_BLOCK`
    turns in turn (which goes first rotates), ``turns`` each after ``warmup`` each: the same turns, the
    same server and the same drift of the machine's speed for all. One batch per runtime, in order."""
    secret = api_key_create(agent=agent, label="bench_turn").secret
    database_pid = database_server_pid()
    timings: list[list[dict[str, float]]] = [[] for _ in names]
    server_s, database_s = [0.0] * len(names), [0.0] * len(names)
    with (
        tempfile.TemporaryDirectory(prefix="bench-turn-") as folder,
        served_process(Path(folder)) as served,
        ExitStack() as stack,
    ):
        base_url, server_pid = served
        runtimes = []
        for name in names:
            runtime = open_runtime(name, base_url, secret)
            if not isinstance(runtime, Client):
                stack.callback(runtime.close)
            runtimes.append(runtime)
        for runtime in runtimes:
            for _ in range(warmup):
                script.turn(runtime)
        for block in range(-(-turns // COMPARISON_BLOCK)):
            count = min(COMPARISON_BLOCK, turns - block * COMPARISON_BLOCK)
            for offset in range(len(names)):
                side = (block + offset) % len(names)
                with CpuAccount(server_pid, database_pid) as cpu:
                    timings[side].extend(script.turn(runtimes[side]) for _ in range(count))
                server_s[side] += cpu.server_s
                database_s[side] += cpu.database_s or 0.0

    def batch(side: int) -> Batch:
        count = len(timings[side])
        database_ms = round(database_s[side] * 1000 / count, 1) if database_pid else None
        return Batch(timings[side], round(server_s[side] * 1000 / count, 1), database_ms)

    return [batch(side) for side in range(len(names))]


def whole_turn(timing: dict[str, float]) -> float:
    """A turn's time in ms: its :data:`TURN_STEPS`."""
    return sum(timing[step] for step in TURN_STEPS)


def turn_figures(timings: list[dict[str, float]]) -> dict[str, Any]:
    """p50/p95 of whole turns, of turns with their ingest and of each step, in ms."""
    whole = sorted(whole_turn(t) for t in timings)
    with_ingest = sorted(sum(t.values()) for t in timings)
    steps = {step: sorted(t[step] for t in timings) for step in STEPS}
    return {
        "p50_ms": round(percentile(whole, 50), 2),
        "p95_ms": round(percentile(whole, 95), 2),
        "with_ingest": {
            "p50_ms": round(percentile(with_ingest, 50), 2),
            "p95_ms": round(percentile(with_ingest, 95), 2),
        },
        "steps": {
            step: {"p50_ms": round(percentile(v, 50), 2), "p95_ms": round(percentile(v, 95), 2)}
            for step, v in steps.items()
        },
    }


# --------------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------------


def ensure_agent(spec: TurnSpec) -> tuple[RuntimeAgent, bool]:
    """The spec's agent, built in one transaction if it is missing (so an agent that exists is complete)."""
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Turn benchmark"})
    agent = RuntimeAgent.objects.filter(tenant=tenant, name=spec.agent_name(0)).first()
    if agent is not None:
        if (
            MemoryEntry.objects.filter(agent=agent).count() < spec.revisions
            or Message.objects.filter(agent=agent).count() < spec.messages
        ):
            raise CommandError(f"agent {agent.name} holds a different corpus; use a fresh database")
        return agent, False
    statements = Statements(random.Random(spec.seed))
    with transaction.atomic():
        agent = build_agent(tenant, spec, 0, statements)
        load_chat(agent, spec.messages - spec.revisions, statements, random.Random(spec.seed * 31 + 7))
    return agent, True


def load_chat(agent: RuntimeAgent, count: int, statements: Statements, rng: random.Random) -> None:
    """Write ``count`` inbound messages (with their source evidence) over the agent's conversations,
    each said by one of the conversation's readers."""
    if count <= 0:
        return
    conversations = list(Conversation.objects.filter(agent=agent).order_by("pk"))
    people = list(Actor.objects.filter(connector__agent=agent).order_by("pk"))
    names = {p.pk: p.display_name.split()[0] for p in people}
    rows = []
    for _ in range(count):
        conversation = rng.choice(conversations)
        readers = list(conversation.audience_readers) or [p.pk for p in people]
        author = rng.choice(readers)
        rows.append(
            (
                agent.pk,
                conversation.pk,
                author,
                statements.make(names[author], names[rng.choice(readers)]),
                CORPUS_EPOCH - timedelta(minutes=rng.randrange(2 * 365 * 24 * 60)),
                conversation.audience_kind,
                conversation.audience_namespace,
                list(conversation.audience_readers),
            )
        )
    columns = (
        "agent_id, conversation_id, actor_id, body, created_at, audience_kind, audience_namespace, audience_readers"
    )
    audience = "audience_kind, audience_namespace, audience_readers"
    with pgtrigger.ignore(*NO_INDEX_WORK), connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_chat")
        cursor.execute(
            "CREATE TEMP TABLE bench_chat (agent_id bigint, conversation_id bigint, actor_id bigint, body text,"
            " created_at timestamptz, audience_kind text, audience_namespace text, audience_readers bigint[],"
            " message_id bigint) ON COMMIT DROP"
        )
        with cursor.cursor.copy(f"COPY bench_chat ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute("UPDATE bench_chat SET message_id = nextval(pg_get_serial_sequence('history_message', 'id'))")
        cursor.execute(
            "INSERT INTO history_message (id, agent_id, conversation_id, actor_id, direction, external_id, body,"
            f" created_at, ingested_at, history_message_ids, memory_revision_ids, cited_revision_ids, {audience})"
            " SELECT message_id, agent_id, conversation_id, actor_id, 'inbound', NULL, body, created_at, created_at,"
            f" '{{}}', '{{}}', '{{}}', {audience} FROM bench_chat"
        )
        cursor.execute(
            "INSERT INTO history_messagesourceevidence (message_id, method, detail, recorded_at)"
            " SELECT message_id, 'connector_signed', '{\"bench\": true}', created_at FROM bench_chat"
        )


# --------------------------------------------------------------------------------------------------
# turns
# --------------------------------------------------------------------------------------------------


#: What :meth:`Client.call` returns for a reply the pre-delivery recheck withheld.
WITHHELD: dict[str, Any] = {"withheld": True}


class Client:
    """A runtime's HTTP client carrying the agent's key (:mod:`bench.harness.http_client`)."""

    def __init__(self, base_url: str, secret: str) -> None:
        self.base_url = base_url
        self.secret = secret

    def call(
        self, method: str, path: str, expect: int, body: Any = None, *, may_withhold: bool = False
    ) -> tuple[Any, float]:
        """The response body and the call's wall time in ms; any other status than ``expect`` is an error.

        ``may_withhold``: a reply the pre-delivery recheck withheld (409 ``reply_withheld``) answers
        :data:`WITHHELD`. A reply is withheld when something it was built from is no longer disclosable,
        which on a corpus reused by many runs happens where replies' lineage has grown past the cap."""
        started = time.perf_counter()
        try:
            answer = http_client.call(
                self.base_url, method, path, timeout=REQUEST_TIMEOUT, secret=self.secret, body=body
            )
        except http_client.NO_ANSWER as error:
            raise CommandError(f"{method} {path} failed: {error}") from error
        elapsed = (time.perf_counter() - started) * 1000
        if may_withhold and answer.status == 409 and answer.json().get("code") == "reply_withheld":
            return WITHHELD, elapsed
        if answer.status != expect:
            raise CommandError(f"{method} {path} answered {answer.status}: {answer.text[:2000]}")
        return answer.json(), elapsed

    # The steps of a turn, as Script.turn takes them from either runtime (this one or ClientRuntime).

    def ingest(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        ingested, ms = self.call("POST", "/api/v1/messages", 201, {"messages": [message]})
        return ingested["messages"][0], ms

    def open_session(self, conversation_id: int, requester_id: int) -> int:
        body = {"conversation_id": conversation_id, "requester_actor_id": requester_id}
        opened, _ = self.call("POST", "/api/v1/sessions", 201, body)
        return int(opened["session_id"])

    def start_turn(self, session_id: int, inbound_id: int, loaded: list[int]) -> tuple[int, float]:
        body = {"inbound_message_id": inbound_id, "loaded_message_ids": loaded}
        turn, ms = self.call("POST", f"/api/v1/sessions/{session_id}/turns", 201, body)
        return int(turn["turn_id"]), ms

    def round(self, turn_id: int, calls: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
        return self.call("POST", f"/api/v1/turns/{turn_id}/rounds", 200, {"calls": calls})

    def ledger(self, turn_id: int) -> float:
        return self.call("GET", f"/api/v1/turns/{turn_id}/ledger", 200)[1]

    def reply(self, turn_id: int, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        return self.call("POST", f"/api/v1/turns/{turn_id}/reply", 201, body, may_withhold=True)


class ClientRuntime:
    """The same steps through the Python client (``engram_client``, clients/python), as an agent
    runtime using it would take them; ``--via-client`` times it beside :class:`Client`."""

    def __init__(self, base_url: str, secret: str) -> None:
        from engram_client import Engram  # the client is a package of its own; only this mode needs it

        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
        self.engram = Engram(base_url, secret, timeout=REQUEST_TIMEOUT, max_retries=0)

    def close(self) -> None:
        self.engram.close()

    @staticmethod
    def _timed(call: Any, *args: Any) -> tuple[Any, float]:
        from engram_client import EngramError

        started = time.perf_counter()
        try:
            result = call(*args)
        except EngramError as error:
            if error.code == "reply_withheld":
                return WITHHELD, (time.perf_counter() - started) * 1000
            raise CommandError(f"{call.__name__} failed: {error}") from error
        return result, (time.perf_counter() - started) * 1000

    def ingest(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        (ingested,), ms = self._timed(self.engram.ingest, [message])
        return ingested.raw, ms

    def open_session(self, conversation_id: int, requester_id: int) -> int:
        return int(self.engram.open_session(conversation_id, requester_actor_id=requester_id).session_id)

    def start_turn(self, session_id: int, inbound_id: int, loaded: list[int]) -> tuple[int, float]:
        turn, ms = self._timed(self.engram.start_turn, session_id, inbound_id, loaded)
        return int(turn.turn_id), ms

    def round(self, turn_id: int, calls: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
        ran, ms = self._timed(self.engram.run_round, turn_id, calls)
        return ran.raw, ms

    def ledger(self, turn_id: int) -> float:
        return self._timed(self.engram.ledger, turn_id)[1]

    def reply(self, turn_id: int, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        delivered, ms = self._timed(self.engram.submit_reply, turn_id, body["body"], body["cited_ids"])
        return (delivered if delivered is WITHHELD else delivered.raw), ms


class TypeScriptClientRuntime:
    """The same steps through the TypeScript client (``engram-client``, clients/typescript) in one Node
    process (:class:`bench.harness.typescript_client.TypeScriptRuntime`); each step's time is measured in
    Node around the awaited client call. ``--clients …,typescript`` times it beside the others."""

    def __init__(self, base_url: str, secret: str) -> None:
        self.node = TypeScriptRuntime(base_url, secret, timeout=REQUEST_TIMEOUT)

    def close(self) -> None:
        self.node.close()

    def _call(self, method: str, *args: Any) -> tuple[Any, float]:
        try:
            return self.node.call(method, *args)
        except RuntimeFailed as error:
            if error.code == "reply_withheld":
                return WITHHELD, error.ms
            raise CommandError(f"{method} through the TypeScript client failed: {error}") from error

    def ingest(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        (ingested,), ms = self._call("ingest", [message])
        return ingested, ms

    def open_session(self, conversation_id: int, requester_id: int) -> int:
        opened, _ = self._call("openSession", conversation_id, {"requester_actor_id": requester_id})
        return int(opened["session_id"])

    def start_turn(self, session_id: int, inbound_id: int, loaded: list[int]) -> tuple[int, float]:
        turn, ms = self._call("startTurn", session_id, inbound_id, loaded)
        return int(turn["turn_id"]), ms

    def round(self, turn_id: int, calls: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
        ran, ms = self._call("runRound", turn_id, calls)
        return dict(ran), ms

    def ledger(self, turn_id: int) -> float:
        return self._call("ledger", turn_id)[1]

    def reply(self, turn_id: int, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        delivered, ms = self._call("submitReply", turn_id, body["body"], body["cited_ids"])
        return delivered, ms


@dataclass(frozen=True)
class Room:
    """A room of the corpus the agent converses in: its thread, its audience as the connector sends it,
    and who may speak there."""

    external_id: str
    audience: dict[str, Any]
    speakers: list[Actor]


@dataclass
class Thread:
    """One conversation in a room, as its connector names it, with the session that serves it."""

    room: Room
    external_id: str
    requester: Actor
    session_id: int = 0
    turns: int = 0
    recent: list[int] = field(default_factory=list)


@dataclass
class Script:
    rng: random.Random
    connector: tuple[str, str]
    rooms: list[Room]
    bodies: list[str]
    run: str
    per_conversation: int = PER_CONVERSATION
    open: list[Thread] = field(default_factory=list)
    #: Conversations that have had a turn.
    conversations: int = 0
    said: int = 0
    #: Replies the pre-delivery recheck withheld (their turns are timed like the others).
    withheld: int = 0

    @classmethod
    def load(cls, agent: RuntimeAgent, rng: random.Random, *, per_conversation: int = PER_CONVERSATION) -> Script:
        people = {p.pk: p for p in Actor.objects.filter(connector__agent=agent).order_by("pk")}
        everyone = list(people.values())
        rooms = []
        # The corpus's own conversations are the rooms; threads opened by earlier runs are not.
        corpus = list(Conversation.objects.filter(agent=agent).exclude(external_thread_id__contains="/").order_by("pk"))
        replies = dict(
            Message.objects.filter(conversation__in=corpus, direction=MessageDirection.OUTBOUND)
            .order_by()
            .values("conversation_id")
            .annotate(n=Count("id"))
            .values_list("conversation_id", "n")
        )
        for conversation in corpus:
            readers = [people[pk] for pk in conversation.audience_readers if pk in people]
            audience: dict[str, Any] = {"kind": conversation.audience_kind}
            if readers:
                audience["readers"] = [p.external_id for p in readers]
            rooms.append(Room(conversation.external_thread_id, audience, readers or everyone))
        bodies = list(
            MemoryEntry.objects.filter(agent=agent)
            .order_by("pk")
            .values_list("current_revision__body", flat=True)[:2_000]
        )
        connector = everyone[0].connector
        script = cls(
            rng=rng,
            connector=(connector.type, connector.name),
            rooms=rooms,
            bodies=[b for b in bodies if b],
            run=datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f"),
            per_conversation=per_conversation,
        )
        # The first conversation of each room is the corpus's own, with its history. Turns an earlier run
        # had there count toward its length, so a reused corpus's conversations end like a fresh one's.
        script.open = [
            Thread(room, room.external_id, rng.choice(room.speakers), turns=replies.get(conversation.pk, 0))
            for room, conversation in zip(rooms, corpus, strict=True)
        ]
        return script

    def thread(self) -> Thread:
        """The conversation the next turn arrives in; one that has had its turns ends, and a new thread
        in the same room takes its place."""
        index = self.rng.randrange(len(self.open))
        thread = self.open[index]
        if thread.turns >= self.per_conversation:
            room = thread.room
            thread = Thread(room, f"{room.external_id}/{self.run}-{self.said}", self.rng.choice(room.speakers))
            self.open[index] = thread
        return thread

    def words(self) -> list[str]:
        terms = content_terms(self.rng.choice(self.bodies))
        return self.rng.sample(terms, min(len(terms), self.rng.randint(1, 3))) or ["update"]

    def turn(self, client: Client | ClientRuntime | TypeScriptClientRuntime) -> dict[str, float]:
        """One whole turn in the next conversation; the wall time of each step in ms."""
        thread = self.thread()
        if not thread.turns:
            self.conversations += 1
        thread.turns += 1
        self.said += 1
        words = self.words()
        message = {
            "connector": {"type": self.connector[0], "name": self.connector[1]},
            "thread": {"external_id": thread.external_id, "audience": thread.room.audience},
            "actor": {"external_id": thread.requester.external_id, "display_name": thread.requester.display_name},
            "external_id": f"bench-{self.run}-{self.said}",
            "body": self.rng.choice(QUESTIONS).format(words=" ".join(words)),
            "created_at": datetime.now(UTC).isoformat(),
            "evidence": {"method": "connector_signed", "detail": {"bench": True}},
        }
        ms: dict[str, float] = {}
        inbound, ms["ingest"] = client.ingest(message)
        if not thread.session_id:
            # Once per conversation, before its first turn: not part of the turn.
            thread.session_id = client.open_session(inbound["conversation_id"], thread.requester.pk)
        turn_id, ms["turn_start"] = client.start_turn(
            thread.session_id, inbound["message_id"], thread.recent[-LOADED_WINDOW:]
        )
        thread.recent.append(inbound["message_id"])
        calls: list[dict[str, Any]] = [
            {"verb": "recall", "query": " ".join(words)},
            {"verb": "search_history", "query": self.rng.choice(words), "limit": 8},
        ]
        ran, ms["round"] = client.round(turn_id, calls)
        ms["ledger"] = client.ledger(turn_id)
        recalled = ran["results"][0]["result"]["items"] if ran["results"][0]["status"] == "ok" else []
        cited = [recalled[0]["id"]] if recalled else []
        reply = {"body": "Here is what I found" + (f" [{cited[0]}]." if cited else "."), "cited_ids": cited}
        delivered, ms["reply"] = client.reply(turn_id, reply)
        if delivered is WITHHELD:
            self.withheld += 1
        else:
            thread.recent.append(delivered["message_id"])
        return ms
