"""Benchmark conversation history search on a large transcript.

``bench_history [--messages 300000] [--agents 40] [--queries 300] [--seed 1] [--explain]`` builds,
once, a corpus in the tenant ``bench-history``: A agents, each with a Slack connector, a dozen people
and conversations of mixed audiences (two workspace channels, two private channels, four DMs), and N
messages spread evenly over the agents. Message text is LoCoMo turns (``bench.locomo`` reads
``/work/shared/bench/locomo/locomo_dev.json``), replicated and replayed in order from a random point
per conversation; every message is inbound, posted by a reader of its conversation, and carries
``connector_signed`` source evidence. Agents are named after (N, A, seed), so a second run with the
same arguments finds and reuses the corpus.

The corpus is written in one transaction with psycopg COPY in batches, message ids drawn from the
table's own sequence, rows in time order across all agents (as a live system receives them: a table
physically ordered by agent plans differently). The AFTER INSERT triggers index each message into
the search sidecar and queue its embedding work in ``memory_indexoutbox``, which stays pending: this
corpus is lexical. Then ``VACUUM ANALYZE`` (plain ``ANALYZE`` inside a transaction, as in tests),
which also empties the GIN index's pending list, as autovacuum would in a running system.

It then reports, for the first agent:

- the plan of the bare sidecar query (``EXPLAIN (ANALYZE, BUFFERS)``) and whether it combines the
  agent-qualified GIN index with the agent index in a ``BitmapAnd``, for a rare term (in at most 3
  of the agent's messages) and a common one (in about a quarter of them, picked with ``ts_stat``);
  the median server execution time of repeated runs of each, with custom plans (Django binds
  parameters client-side, so psycopg never prepares) and, for comparison, with a forced generic plan
  (what a prepared statement may switch to);
- ``search_history`` latency p50/p95 (lexical: no semantic provider) over Q realistic queries (a
  LoCoMo question, or a few of its words, asked from a random conversation of a random agent by one
  of its participants), after a warm-up, and the median time of each statement the service runs.
  ``--explain`` (or a missed target) adds ``EXPLAIN (ANALYZE, BUFFERS)`` of the slowest query's
  statements.

The last line is one JSON object: ``messages``, ``bitmap_and``, ``sql_rare_ms``, ``sql_common_ms``,
``service_p50_ms``, ``service_p95_ms``.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from tqdm import tqdm

from accounts.models import Actor, Connector, RuntimeAgent, Tenant
from bench.harness.corpus import CorpusSpec, locomo_dev_path, settle
from bench.harness.stats import percentile
from bench.locomo import load_locomo
from history.audience import Audience
from history.models import Conversation, Message, agent_terms_match
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history

TENANT_SLUG = "bench-history"
PEOPLE_PER_AGENT = 12
DIRECT_CONVERSATIONS = 4
BATCH = 10_000
#: Messages are dated over the two years before this instant.
CORPUS_EPOCH = datetime(2025, 6, 1, tzinfo=UTC)
SPAN_MINUTES = 2 * 365 * 24 * 60
SQL_RUNS = 15
WARMUP = 20
BREAKDOWN_SAMPLE = 50
TARGETS = {"sql_rare_ms": 1.0, "sql_common_ms": 10.0, "service_p95_ms": 25.0}
RARE_MAX_DOCS = 3
#: Words a query never looks for on their own (``engram_search_query`` keeps negations as terms).
NEGATIONS = {"not", "no", "never", "nor", "without", "cannot"}
_WORD = re.compile(r"[a-z]{4,}")

#: The sidecar query search rests on: the service's own match (through the agent-qualified terms
#: index), ranked by ``ts_rank_cd``. Its parameters are ``bare_params``.
BARE_SQL = (
    "SELECT d.message_id FROM history_messagesearchdocument d"
    f" WHERE {agent_terms_match('%s', '%s')}"
    " ORDER BY ts_rank_cd(d.tsv, engram_search_query(%s)) DESC LIMIT 200"
)
GENERIC_SQL = (
    "PREPARE bench_history_probe(bigint, text) AS SELECT d.message_id FROM history_messagesearchdocument d"
    f" WHERE {agent_terms_match('$1', '$2')}"
    " ORDER BY ts_rank_cd(d.tsv, engram_search_query($2)) DESC LIMIT 200"
)


def bare_params(agent_id: int, text: str) -> list[int | str]:
    """The parameters of ``BARE_SQL`` (and of any sidecar query written like it) for one search."""
    return [agent_id, agent_id, text, text]


class Spec(CorpusSpec):
    name_format = "hist-m{messages}-a{agents}-s{seed}-{index:03d}"


class Command(BaseCommand):
    help = "Build (once) a large transcript and time history search over it: sidecar SQL and the service."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--messages", type=int, default=300_000, help="Messages in the corpus.")
        parser.add_argument("--agents", type=int, default=40, help="Agents the messages are spread over.")
        parser.add_argument("--queries", type=int, default=300, help="Timed search_history calls.")
        parser.add_argument("--seed", type=int, default=1, help="Seed of the corpus and of the queries.")
        parser.add_argument("--explain", action="store_true", help="EXPLAIN the slowest query's statements.")

    def handle(self, *args: Any, **options: Any) -> None:
        spec = Spec(messages=options["messages"], agents=options["agents"], seed=options["seed"])
        if spec.agents < 1 or spec.messages < spec.agents * 20 or options["queries"] < 1:
            raise CommandError("need at least one agent, 20 messages per agent and one query")
        texts = locomo_texts()
        started = time.perf_counter()
        agents, built = ensure_corpus(spec, texts, quiet=options["verbosity"] < 1)
        elapsed = time.perf_counter() - started
        analyzed = ("ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE") if built else "statistics kept"
        self.stdout.write(
            f"corpus {'built' if built else 'reused'}: {spec.messages} messages over {spec.agents} agents "
            f"in {elapsed:.1f}s ({analyzed})"
        )

        probe = agents[0]
        terms = pick_terms(probe.pk, spec.messages_of(0), random.Random(spec.seed))
        figures: dict[str, Any] = {"messages": spec.messages}
        combined = []
        for label, (term, docs) in (("rare", terms[0]), ("common", terms[1])):
            measured = measure_sql(probe.pk, term)
            combined.append(measured.bitmap_and)
            figures[f"sql_{label}_ms"] = round(measured.median_ms, 3)
            self.stdout.write(
                f"sidecar SQL, {label} term {term!r} ({docs} of {spec.messages_of(0)} messages of agent {probe.pk}): "
                f"execution median {measured.median_ms:.3f} ms (planning {measured.planning_ms:.3f} ms, "
                f"client round trip {measured.client_ms:.3f} ms), BitmapAnd {measured.bitmap_and}; "
                f"forced generic plan {measured.generic_ms:.3f} ms, BitmapAnd {measured.generic_bitmap_and}"
            )
            if options["verbosity"] > 1 or label == "common":
                self.stdout.write("\n".join(f"    {line}" for line in measured.plan))
        figures["bitmap_and"] = all(combined)

        bench = ServiceBench.load(agents, random.Random(spec.seed * 7919 + options["queries"]))
        for _ in range(WARMUP):
            bench.time(bench.question())
        # Sorted by time alone: two questions timed alike must not be compared with each other.
        timings = sorted(
            ((bench.time(q), q) for q in (bench.question() for _ in range(options["queries"]))), key=lambda t: t[0]
        )
        values = [ms for ms, _ in timings]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        figures["service_p50_ms"], figures["service_p95_ms"] = round(p50, 3), round(p95, 3)
        self.stdout.write(
            f"search_history x{len(values)}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {values[-1]:.2f} ms, "
            f"mean hits {statistics.fmean(bench.hits):.1f}"
        )
        self.stdout.write("median per statement over a sample of the queries:")
        for label, ms, count in bench.breakdown([q for _, q in timings[:: max(1, len(timings) // BREAKDOWN_SAMPLE)]]):
            self.stdout.write(f"    {ms:8.3f} ms  x{count:<3} {label}")
        missed = [name for name, limit in TARGETS.items() if figures[name] >= limit]
        if missed:
            self.stdout.write(f"targets missed: {', '.join(missed)}")
        if options["explain"] or "service_p95_ms" in missed:
            ms, slowest = timings[-1]
            self.stdout.write(f"--- slowest query ({ms:.2f} ms): {slowest.text!r}")
            self.stdout.write(bench.explain(slowest))
        self.stdout.write(
            json.dumps(
                {
                    name: figures[name]
                    for name in (
                        "messages",
                        "bitmap_and",
                        "sql_rare_ms",
                        "sql_common_ms",
                        "service_p50_ms",
                        "service_p95_ms",
                    )
                }
            )
        )


def locomo_texts() -> list[str]:
    locomo = locomo_dev_path()
    if not locomo.exists():
        raise CommandError(f"{locomo} is missing: the corpus is built from its turns")
    parsed = load_locomo(locomo)
    texts = [turn.text for conversation in parsed.conversations for turn in conversation.turns]
    if not texts:
        raise CommandError(f"{locomo} holds no turns")
    return texts


# --------------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------------


def ensure_corpus(spec: Spec, texts: list[str], *, quiet: bool = False) -> tuple[list[RuntimeAgent], bool]:
    """The spec's agents, with their messages; built in one transaction when absent, so agents that
    exist hold the complete corpus."""
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "History search benchmark"})
    names = [spec.agent_name(index) for index in range(spec.agents)]
    existing = {a.name: a for a in RuntimeAgent.objects.filter(tenant=tenant, name__in=names)}
    if existing:
        if len(existing) != len(names) or Message.objects.filter(agent__in=existing.values()).count() != spec.messages:
            raise CommandError("the bench-history tenant holds a different corpus for these arguments")
        return [existing[name] for name in names], False
    with transaction.atomic(), immediate_constraints():
        rows: list[tuple[Any, ...]] = []
        agents = []
        for index in range(spec.agents):
            agent, agent_rows = plan_agent(tenant, spec, index, texts)
            agents.append(agent)
            rows.extend(agent_rows)
        # created_at is the last column: arrival order across all agents.
        rows.sort(key=lambda row: row[-1])
        with tqdm(total=len(rows), unit="msg", desc="bench_history corpus", disable=quiet) as progress:
            for start in range(0, len(rows), BATCH):
                batch = rows[start : start + BATCH]
                load_batch(batch)
                progress.update(len(batch))
    settle()
    return agents, True


@contextmanager
def immediate_constraints() -> Iterator[None]:
    """Check deferrable constraints per statement for the duration of a bulk load.

    Every message insert runs pgtrigger functions whose ignore check enters a subtransaction, and
    ending a subtransaction walks the transaction's list of deferred trigger events. With the foreign
    keys deferred to commit that list grows with every row, so a load in one transaction slows down
    quadratically (the batch of 10,000 rows that starts at 120,000 took a minute); checked per
    statement, the list stays empty.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            # Django declares its foreign keys DEFERRABLE INITIALLY DEFERRED: this restores them.
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def plan_agent(tenant: Tenant, spec: Spec, index: int, texts: list[str]) -> tuple[RuntimeAgent, list[tuple[Any, ...]]]:
    """Create one agent's people and conversations; answer the message rows to load for it."""
    rng = random.Random(spec.seed * 1_000_003 + index)
    agent = RuntimeAgent.objects.create(tenant=tenant, name=spec.agent_name(index))
    connector = Connector.objects.create(agent=agent, type="slack", name=f"hist{index:03d}")
    people = Actor.objects.bulk_create(
        Actor(tenant=tenant, connector=connector, external_id=f"U{index:03d}{n:03d}", display_name=f"Person {n}")
        for n in range(PEOPLE_PER_AGENT)
    )
    namespace = connector.namespace
    rooms: list[tuple[float, Audience, str]] = [
        (0.30, Audience.workspace(namespace), "general"),
        (0.15, Audience.workspace(namespace), "random"),
    ]
    for n in range(2):
        readers = rng.sample(people, rng.randint(3, 5))
        rooms.append((0.10, Audience.members(namespace, [p.pk for p in readers]), f"private-{n}"))
    for person in people[:DIRECT_CONVERSATIONS]:
        rooms.append((0.35 / DIRECT_CONVERSATIONS, Audience.members(namespace, [person.pk]), f"dm-{person.pk}"))
    conversations = Conversation.objects.bulk_create(
        Conversation(
            agent=agent,
            connector=connector,
            external_thread_id=thread,
            title=thread,
            audience_kind=audience.kind,
            audience_namespace=audience.namespace,
            audience_readers=list(audience.readers),
        )
        for _, audience, thread in rooms
    )
    rows = plan_messages(
        conversations,
        weights=[w for w, _, _ in rooms],
        everyone=[p.pk for p in people],
        count=spec.messages_of(index),
        texts=texts,
        rng=rng,
    )
    return agent, rows


def plan_messages(
    conversations: list[Conversation],
    *,
    weights: list[float],
    everyone: list[int],
    count: int,
    texts: list[str],
    rng: random.Random,
) -> list[tuple[Any, ...]]:
    """``count`` message rows (for ``load_batch``) dealt over ``conversations`` by ``weights``, each
    said by a reader of its conversation (anyone of ``everyone`` where all may read) and dated over the
    two years before the corpus epoch."""
    sizes = [0] * len(conversations)
    for choice in rng.choices(range(len(conversations)), weights=weights, k=count):
        sizes[choice] += 1
    rows: list[tuple[Any, ...]] = []
    for conversation, size in zip(conversations, sizes, strict=True):
        speakers = list(conversation.audience_readers) or everyone
        offset = rng.randrange(len(texts))
        # Each room replays the transcript from its own starting point, in time order.
        moments = sorted(rng.randrange(SPAN_MINUTES) for _ in range(size))
        for position, minute in enumerate(moments):
            created_at = CORPUS_EPOCH - timedelta(minutes=SPAN_MINUTES - minute, seconds=rng.randrange(60))
            rows.append(
                (
                    conversation.agent_id,
                    conversation.pk,
                    rng.choice(speakers),
                    texts[(offset + position) % len(texts)],
                    conversation.audience_kind,
                    conversation.audience_namespace,
                    list(conversation.audience_readers),
                    created_at,
                )
            )
    return rows


def load_batch(rows: list[tuple[Any, ...]]) -> None:
    """COPY one batch of messages (ids from the table's sequence) and their source evidence."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence('history_message', 'id')) FROM generate_series(1, %s)", [len(rows)]
        )
        ids = [row[0] for row in cursor.fetchall()]
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper, for COPY
        with raw.copy(
            "COPY history_message (id, agent_id, conversation_id, actor_id, direction, external_id, body,"
            " audience_kind, audience_namespace, audience_readers, created_at, ingested_at,"
            " history_message_ids, memory_revision_ids, cited_revision_ids) FROM STDIN"
        ) as copy:
            for message_id, (agent_id, conversation_id, actor_id, body, kind, namespace, readers, created_at) in zip(
                ids, rows, strict=True
            ):
                copy.write_row(
                    (
                        message_id,
                        agent_id,
                        conversation_id,
                        actor_id,
                        "inbound",
                        None,
                        body,
                        kind,
                        namespace,
                        readers,
                        created_at,
                        created_at,
                        [],
                        [],
                        [],
                    )
                )
        with raw.copy(
            "COPY history_messagesourceevidence (message_id, method, detail, recorded_at) FROM STDIN"
        ) as copy:
            for message_id, row in zip(ids, rows, strict=True):
                copy.write_row((message_id, "connector_signed", '{"bench": "history"}', row[-1]))


# --------------------------------------------------------------------------------------------------
# the bare sidecar query
# --------------------------------------------------------------------------------------------------


def pick_terms(agent_id: int, total: int, rng: random.Random) -> tuple[tuple[str, int], tuple[str, int]]:
    """A rare term (in 1-3 of the agent's messages) and a common one (closest to a quarter of them),
    each a word that ``engram_search_query`` turns into exactly its own lexeme."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT word, ndoc FROM ts_stat(%s) WHERE word ~ '^[a-z]{4,}$'"
            " AND engram_search_query(word)::text = quote_literal(word) ORDER BY word",
            [f"SELECT tsv FROM history_messagesearchdocument WHERE agent_id = {int(agent_id)}"],
        )
        stats = [(word, int(ndoc)) for word, ndoc in cursor.fetchall() if word not in NEGATIONS]
    if not stats:
        raise CommandError("the probe agent's messages hold no searchable words")
    rare = [item for item in stats if item[1] <= RARE_MAX_DOCS] or [min(stats, key=lambda item: item[1])]
    common = min(stats, key=lambda item: (abs(item[1] - total / 4), item[0]))
    return rng.choice(rare), common


@dataclass(frozen=True)
class SqlMeasurement:
    median_ms: float
    planning_ms: float
    client_ms: float
    bitmap_and: bool
    plan: list[str]
    generic_ms: float
    generic_bitmap_and: bool


def _explain(cursor: Any, sql: str, params: Any = None) -> tuple[list[str], float, float]:
    cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
    plan = [row[0] for row in cursor.fetchall()]
    execution = planning = 0.0
    for line in plan:
        if match := re.match(r"\s*Execution Time: ([\d.]+) ms", line):
            execution = float(match[1])
        elif match := re.match(r"\s*Planning Time: ([\d.]+) ms", line):
            planning = float(match[1])
    return plan, execution, planning


def measure_sql(agent_id: int, term: str) -> SqlMeasurement:
    """Median of repeated runs of the bare sidecar query, with a custom plan and with a generic one."""
    params = bare_params(agent_id, term)
    executions, plannings, client = [], [], []
    plan: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(BARE_SQL, params)  # warm the cache
        for _ in range(SQL_RUNS):
            plan, execution, planning = _explain(cursor, BARE_SQL, params)
            executions.append(execution)
            plannings.append(planning)
            started = time.perf_counter()
            cursor.execute(BARE_SQL, params)
            cursor.fetchall()
            client.append((time.perf_counter() - started) * 1000)
        # What a server-side prepared statement may switch to after five executions.
        cursor.execute(GENERIC_SQL)
        try:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            generic = []
            generic_plan: list[str] = []
            for _ in range(SQL_RUNS):
                generic_plan, execution, _ = _explain(cursor, "EXECUTE bench_history_probe(%s, %s)", [agent_id, term])
                generic.append(execution)
        finally:
            cursor.execute("RESET plan_cache_mode")
            cursor.execute("DEALLOCATE bench_history_probe")
    return SqlMeasurement(
        median_ms=statistics.median(executions),
        planning_ms=statistics.median(plannings),
        client_ms=statistics.median(client),
        bitmap_and=any("BitmapAnd" in line for line in plan),
        plan=plan,
        generic_ms=statistics.median(generic),
        generic_bitmap_and=any("BitmapAnd" in line for line in generic_plan),
    )


# --------------------------------------------------------------------------------------------------
# the service
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    sql: str
    params: Any
    ms: float


class StatementTimer:
    """A database execute wrapper that records every statement with its wall time (microsecond
    resolution, where query capture rounds to whole milliseconds)."""

    def __init__(self) -> None:
        self.statements: list[Statement] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.statements.append(Statement(sql, params, (time.perf_counter() - started) * 1000))


@dataclass(frozen=True)
class Question:
    conversation: Conversation
    requester_id: int
    text: str


#: How each statement the service runs is recognised in a capture, first match wins.
STATEMENT_LABELS = (
    ("judged_in_order", "lexical scan"),
    ("hit AS (SELECT em.* FROM em", "hydrate hits"),
    ("WITH em AS", "neighbours"),
    ("AS c(id) WHERE EXISTS", "requester spoke in"),
    ("ORDER BY created_at DESC, id DESC LIMIT", "current window"),
    ("accounts_identitylink", "requester identities"),
    ('FROM "accounts_actor"', "actor labels"),
    ("history_conversationsearchevent", "audit row"),
    ("SAVEPOINT", "transaction"),
    ("RELEASE SAVEPOINT", "transaction"),
)


def statement_label(sql: str) -> str:
    for marker, label in STATEMENT_LABELS:
        if marker in sql:
            return label
    return sql[:60]


@dataclass
class ServiceBench:
    rng: random.Random
    conversations: list[list[Conversation]]
    people: list[list[int]]
    questions: list[str]
    hits: list[int]

    @classmethod
    def load(cls, agents: list[RuntimeAgent], rng: random.Random) -> ServiceBench:
        parsed = load_locomo(locomo_dev_path())
        questions = [q.question for c in parsed.conversations for q in c.questions if q.question.strip()]
        return cls(
            rng=rng,
            conversations=[list(Conversation.objects.filter(agent=a).order_by("pk")) for a in agents],
            people=[
                list(Actor.objects.filter(connector__agent=a).order_by("pk").values_list("pk", flat=True))
                for a in agents
            ],
            questions=questions,
            hits=[],
        )

    def question(self) -> Question:
        index = self.rng.randrange(len(self.conversations))
        conversation = self.rng.choice(self.conversations[index])
        # A participant: a reader of a private room, anyone of the workspace in a channel.
        requester = self.rng.choice(list(conversation.audience_readers) or self.people[index])
        text = self.rng.choice(self.questions)
        if self.rng.random() < 0.5:
            # Models often search with a few remembered words rather than the whole question.
            words = list(dict.fromkeys(_WORD.findall(text.lower())))
            if words:
                text = " ".join(self.rng.sample(words, min(len(words), self.rng.randint(1, 3))))
        return Question(conversation=conversation, requester_id=requester, text=text)

    def time(self, question: Question) -> float:
        perspective = perspective_for_conversation(question.conversation, requester_id=question.requester_id)
        started = time.perf_counter()
        # The corpus is lexical: no semantic provider is consulted.
        result = search_history(perspective=perspective, query=HistoryQuery(text=question.text), providers=())
        elapsed = (time.perf_counter() - started) * 1000
        self.hits.append(len(result.hits))
        return elapsed

    def captured(self, question: Question) -> list[Statement]:
        perspective = perspective_for_conversation(question.conversation, requester_id=question.requester_id)
        timer = StatementTimer()
        with connection.execute_wrapper(timer):
            search_history(perspective=perspective, query=HistoryQuery(text=question.text), providers=())
        return timer.statements

    def breakdown(self, sample: list[Question]) -> list[tuple[str, float, int]]:
        """(statement, median ms per search, searches it ran in), slowest first."""
        per_label: dict[str, list[float]] = defaultdict(list)
        for question in sample:
            totals: dict[str, float] = defaultdict(float)
            for statement in self.captured(question):
                totals[statement_label(statement.sql)] += statement.ms
            for label, ms in totals.items():
                per_label[label].append(ms)
        rows = [(label, statistics.median(values), len(values)) for label, values in per_label.items()]
        return sorted(rows, key=lambda row: -row[1])

    def explain(self, question: Question) -> str:
        """Each statement of one search with its time, then the plans of its three heavy statements (the
        lexical scan's query is explained to its end, beyond what the cursor fetched)."""
        statements = self.captured(question)
        lines = [f"  {s.ms:8.2f} ms  {statement_label(s.sql)}" for s in statements]
        with connection.cursor() as cursor:
            for statement in statements:
                label = statement_label(statement.sql)
                sql = statement.sql.lstrip()
                if sql.startswith("DECLARE"):
                    # The scan's query, run to its end (without the FETCH sent with its declaration).
                    sql = sql.split("CURSOR FOR", 1)[1].rsplit(";", 1)[0]
                elif label not in ("neighbours", "hydrate hits"):
                    continue
                plan, _, _ = _explain(cursor, sql, statement.params)
                lines.append(f"plan of {label}:")
                lines.extend(f"    {line}" for line in plan)
        return "\n".join(lines)
