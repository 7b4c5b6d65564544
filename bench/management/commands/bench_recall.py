"""Benchmark the recall service on a large lexical corpus.

``bench_recall [--revisions N] [--agents A] [--queries Q] [--seed S] [--explain]`` builds, once, a
corpus in the tenant ``bench-recall``: A agents with a Slack connector, 40 people each, public,
workspace, private and direct conversations, and N single-revision memories spread evenly over the
agents. Each memory is a short realistic statement about a person (templates over word lists, mixed
with the LoCoMo observations when that file is present), stated in an authenticated message of one
conversation whose audience it inherits. Agents are named after (N, A, seed), so a second run with
the same arguments finds and reuses the corpus.

The corpus is written with bulk SQL (COPY into a staging table, then ``INSERT ... SELECT`` per
table, one transaction per agent); the sidecar triggers index the text as rows arrive. The
benchmark corpus is lexical only, so its inserts queue no embedding work.

Then it settles the tables (``VACUUM (ANALYZE)``), warms up, and times ``recall()`` for Q questions of
1-4 corpus words, each from a random conversation of a random agent, and prints p50/p95/p99. The
last line is one JSON object.
``--explain`` prints EXPLAIN ANALYZE of the arms statement of the slowest and the median question.
``--source-arm both`` times every question twice, without and with memory recall's source arm
(``memory.retrieval.sources``, over the messages' words alone: the corpus has no vectors), which
goes first alternating from one question to the next, so that a drift of the machine's speed falls on
both alike; the table and the JSON's top-level figures are without the arm, ``source_arm`` holds the
figures with it and ``p95_ratio`` its p95 over the other's.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pgtrigger
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from tqdm import tqdm

from accounts.models import Actor, Connector, RuntimeAgent, Tenant
from bench.harness.corpus import CorpusSpec, locomo_dev_path, settle
from bench.harness.stats import percentile
from history.audience import Audience
from history.models import Conversation
from memory.models import MemoryEntry
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import content_terms, form_query
from memory.retrieval.service import RecallProvider, recall, task_budget
from memory.retrieval.sources import SourceMessages

TENANT_SLUG = "bench-recall"
PEOPLE_PER_AGENT = 40
DIRECT_CONVERSATIONS = 12
PRIVATE_CHANNELS = 4
WARMUP = 25
#: Statements are dated over two years before this instant, so recency ordering has real spread.
CORPUS_EPOCH = datetime(2025, 6, 1, tzinfo=UTC)

FIRST_NAMES = (
    "Priya Sam Marco Dana Lena Omar Yuki Ines Tomas Ravi Greta Hugo Amara Jonas Mei Lucas Sofia Kofi Elena Mateo "
    "Aisha Felix Nora Diego Hana Viktor Leila Oskar Chloe Ibrahim Freya Tariq Zoe Emil Rosa Kenji Maya Arjun Lina Pablo"
).split()
SURNAMES = (
    "Raman Okafor Bianchi Whitfield Novak Haddad Tanaka Silva Berg Iyer Larsen Moreau Costa Fischer Dubois".split()
)

WORDS: dict[str, tuple[str, ...]] = {
    "food": tuple(
        "sushi ramen falafel tacos risotto curry dumplings pierogi paella pho burritos lasagna hummus kimchi "
        "croissants bagels oatmeal granola espresso matcha kombucha chai".split()
    ),
    "place": tuple(
        "Lisbon Berlin Porto Madrid Oslo Krakow Vienna Dublin Turin Ghent Bergen Riga Seattle Austin Toronto "
        "Nairobi Lagos Seoul Osaka Melbourne Valencia Prague".split()
    ),
    "hobby": tuple(
        "tennis chess padel football climbing rowing pottery painting photography gardening cycling running "
        "swimming baking knitting woodworking birdwatching surfing skiing yoga hiking sailing".split()
    ),
    "component": tuple(
        "billing ingestion dashboard gateway scheduler exporter warehouse checkout search onboarding "
        "notifications reporting payments auth analytics pipeline".split()
    ),
    "project": tuple("Atlas Borealis Cyclone Delta Ember Fjord Granite Harbor".split()),
    "pet": tuple("dog cat parrot rabbit hamster tortoise goldfish".split()),
    "pet_name": tuple("Luna Milo Biscuit Pepper Olive Mochi Rocky Nala Ziggy Ginger".split()),
    "vehicle": tuple("bicycle scooter hatchback campervan motorbike pickup sedan".split()),
    "color": tuple("red green silver black yellow blue white".split()),
    "day": tuple("Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()),
    "month": tuple("January February March April May June July August September October November December".split()),
    "relation": tuple("sister brother daughter son partner mother father cousin".split()),
    "instrument": tuple("guitar piano violin drums cello saxophone ukulele".split()),
    "book": tuple("mystery fantasy biography poetry history science-fiction cookbook".split()),
    "tool": tuple("Postgres Redis Kafka Terraform Grafana Kubernetes Django React Rust Go Python Figma".split()),
}
TEMPLATES = (
    "{name} prefers {food} for lunch on {day}s.",
    "{name} is allergic to {food}.",
    "{name} lives in {place} with a {pet} called {pet_name}.",
    "{name} moved to {place} in {month}.",
    "{name} plays {hobby} every {day} evening.",
    "{name} took up {hobby} last {month} and loves it.",
    "{name} drives a {color} {vehicle} to the {place} office.",
    "{name}'s {relation} is studying in {place}.",
    "{name}'s {relation} {other} plays the {instrument}.",
    "{name} leads the {component} work on {project}.",
    "{name} owns the {project} {component} runbook.",
    "The {project} {component} release is planned for {month}.",
    "{name} reviews {project} {component} changes on {day}s.",
    "{name} wants the {component} dashboards moved to {tool}.",
    "{name} is learning {tool} for the {project} {component} rewrite.",
    "{name} reads a {book} book every month.",
    "{name} and {other} are pairing on the {component} migration.",
    "{name} is on holiday in {place} until the end of {month}.",
    "{name} prefers short written updates over meetings.",
    "{name} starts work at 8 and avoids meetings before 10.",
    "{name} mentors {other} on {tool}.",
    "{name} volunteers at a {hobby} club in {place}.",
)


class Spec(CorpusSpec):
    name_format = "bench-n{revisions}-a{agents}-s{seed}-{index:03d}"


class Command(BaseCommand):
    help = "Build (once) a large memory corpus and time the recall service over it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--revisions", type=int, default=100_000, help="Memory revisions in the corpus.")
        parser.add_argument("--agents", type=int, default=20, help="Agents the revisions are spread over.")
        parser.add_argument("--queries", type=int, default=500, help="Timed recalls.")
        parser.add_argument("--seed", type=int, default=1, help="Seed of the corpus and of the questions.")
        parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the arms statement.")
        parser.add_argument(
            "--source-arm",
            choices=("off", "both"),
            default="off",
            help="both: time each question without and with the source arm, side by side.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        spec = Spec(revisions=options["revisions"], agents=options["agents"], seed=options["seed"])
        if spec.agents < 1 or spec.revisions < spec.agents or options["queries"] < 1:
            raise CommandError("need at least one agent, one revision per agent and one query")
        started = time.perf_counter()
        agents, built = ensure_corpus(spec)
        elapsed = time.perf_counter() - started
        verb = "built" if built else "reused"
        self.stdout.write(f"corpus {verb}: {spec.revisions} revisions over {spec.agents} agents in {elapsed:.1f}s")

        settle()
        bench = Bench.load(agents, random.Random(spec.seed * 7919 + options["queries"]))
        for _ in range(WARMUP):
            bench.run_one()
        side_by_side = options["source_arm"] == "both"
        if side_by_side:
            for _ in range(WARMUP):
                bench.time(bench.question(), sourced=True)
        timings: list[tuple[float, Question]] = []
        items: list[int] = []
        sourced: list[float] = []
        for index in range(options["queries"]):
            question = bench.question()
            if side_by_side and index % 2:
                sourced.append(bench.time(question, sourced=True)[0])
            ms, returned = bench.time(question)
            timings.append((ms, question))
            items.append(returned)
            if side_by_side and not index % 2:
                sourced.append(bench.time(question, sourced=True)[0])

        values = sorted(ms for ms, _ in timings)
        p50, p95, p99 = percentile(values, 50), percentile(values, 95), percentile(values, 99)
        self.stdout.write(
            f"recall x{len(values)}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms, "
            f"max {values[-1]:.2f} ms, mean items {statistics.fmean(items):.2f}"
        )
        summary: dict[str, Any] = {}
        if side_by_side:
            with_arm = sorted(sourced)
            arm_p50, arm_p95 = percentile(with_arm, 50), percentile(with_arm, 95)
            self.stdout.write(
                f"recall with the source arm x{len(with_arm)}: p50 {arm_p50:.2f} ms, p95 {arm_p95:.2f} ms, "
                f"p95 {arm_p95 / p95:.2f} times the recall without it"
            )
            summary = {
                "source_arm": {"p50_ms": round(arm_p50, 3), "p95_ms": round(arm_p95, 3)},
                "p95_ratio": round(arm_p95 / p95, 3),
            }
        if options["explain"]:
            ordered = sorted(timings, key=lambda t: t[0])
            for label, (ms, question) in (("median", ordered[len(ordered) // 2]), ("slowest", ordered[-1])):
                self.stdout.write(f"--- {label} question ({ms:.2f} ms): {question.text!r}")
                self.stdout.write(bench.explain(question))
        self.stdout.write(
            json.dumps(
                {
                    "revisions": spec.revisions,
                    "agents": spec.agents,
                    "queries": len(values),
                    "p50_ms": round(p50, 3),
                    "p95_ms": round(p95, 3),
                    "p99_ms": round(p99, 3),
                    **summary,
                }
            )
        )


# --------------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------------


def ensure_corpus(spec: CorpusSpec) -> tuple[list[RuntimeAgent], bool]:
    """The spec's agents, building whichever are missing. Each agent is built in one transaction, so
    an agent that exists is complete."""
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "Recall benchmark"})
    statements = Statements(random.Random(spec.seed))
    agents: list[RuntimeAgent] = []
    built = False
    progress = tqdm(total=spec.revisions, unit="rev", desc="bench corpus", mininterval=0.5)
    for index in range(spec.agents):
        agent = RuntimeAgent.objects.filter(tenant=tenant, name=spec.agent_name(index)).first()
        if agent is None:
            agent = build_agent(tenant, spec, index, statements)
            built = True
        elif MemoryEntry.objects.filter(agent=agent).count() != spec.revisions_of(index):
            raise CommandError(f"agent {agent.name} holds a different corpus; use a fresh database")
        agents.append(agent)
        progress.update(spec.revisions_of(index))
    progress.close()
    return agents, built


class Statements:
    """Deterministic short statements about people: templates over word lists plus LoCoMo facts."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.facts: list[tuple[str, str]] = []
        locomo = locomo_dev_path()
        if locomo.exists():
            for sample in json.loads(locomo.read_text()):
                for session in sample.get("observation", {}).values():
                    for speaker, facts in session.items():
                        self.facts.extend((speaker, fact[0]) for fact in facts if fact and fact[0])

    def make(self, name: str, other: str) -> str:
        if self.facts and self.rng.random() < 0.3:
            speaker, fact = self.rng.choice(self.facts)
            return fact.replace(speaker, name)
        # Word choice is Zipf-like, as in real text: a few topics are common, most are rare.
        fills = {
            key: values[min(int(self.rng.paretovariate(1.2)) - 1, len(values) - 1)]
            if self.rng.random() < 0.5
            else self.rng.choice(values)
            for key, values in WORDS.items()
        }
        return self.rng.choice(TEMPLATES).format(name=name, other=other, **fills)


STAGE_COLUMNS = (
    "agent_id, conversation_id, actor_id, subject_id, body, belief_type, confidence, salience, always_on, "
    "lifecycle, origin_scope, created_at, audience_kind, audience_namespace, audience_readers"
)


def build_agent(tenant: Tenant, spec: CorpusSpec, index: int, statements: Statements) -> RuntimeAgent:
    rng = random.Random(spec.seed * 1_000_003 + index)
    with transaction.atomic():
        agent = RuntimeAgent.objects.create(tenant=tenant, name=spec.agent_name(index))
        connector = Connector.objects.create(agent=agent, type="slack", name=f"bench{index:03d}")
        people = Actor.objects.bulk_create(
            Actor(
                tenant=tenant,
                connector=connector,
                external_id=f"U{index:03d}{n:03d}",
                display_name=f"{FIRST_NAMES[n % len(FIRST_NAMES)]} {rng.choice(SURNAMES)}",
            )
            for n in range(PEOPLE_PER_AGENT)
        )
        namespace = connector.namespace
        rooms: list[tuple[float, Audience, str]] = [
            (0.10, Audience.public(), "announcements"),
            (0.25, Audience.workspace(namespace), "general"),
            (0.15, Audience.workspace(namespace), "engineering"),
        ]
        for n in range(PRIVATE_CHANNELS):
            readers = rng.sample(people, rng.randint(3, 6))
            rooms.append(
                (0.20 / PRIVATE_CHANNELS, Audience.members(namespace, [p.pk for p in readers]), f"private-{n}")
            )
        for person in people[:DIRECT_CONVERSATIONS]:
            rooms.append((0.30 / DIRECT_CONVERSATIONS, Audience.members(namespace, [person.pk]), f"dm-{person.pk}"))
        conversations = Conversation.objects.bulk_create(
            Conversation(
                agent=agent,
                connector=connector,
                external_thread_id=thread,
                title=thread,
                project=rng.choice(WORDS["project"]).lower() if not audience.is_direct else "",
                audience_kind=audience.kind,
                audience_namespace=audience.namespace,
                audience_readers=list(audience.readers),
            )
            for _, audience, thread in rooms
        )
        by_id = {p.pk: p for p in people}
        weights = [w for w, _, _ in rooms]
        belief_types = ["user_model_attr", "preference", "relationship", "project_fact", "event", "status", "skill"]
        rows = []
        for _ in range(spec.revisions_of(index)):
            conversation = rng.choices(conversations, weights=weights)[0]
            readers = [by_id[r] for r in conversation.audience_readers] or people
            author = rng.choice(readers)
            roll = rng.random()
            subject = author if roll < 0.5 else (rng.choice(people) if roll < 0.85 else None)
            about = subject or author
            body = statements.make(about.display_name.split()[0], rng.choice(people).display_name.split()[0])
            rows.append(
                (
                    agent.pk,
                    conversation.pk,
                    author.pk,
                    subject.pk if subject else None,
                    body,
                    rng.choice(belief_types),
                    round(rng.uniform(0.5, 1.0), 2),
                    round(rng.random(), 2),
                    rng.random() < 0.002,
                    "provisional" if rng.random() < 0.05 else "active",
                    conversation.project,
                    CORPUS_EPOCH - timedelta(minutes=rng.randrange(2 * 365 * 24 * 60)),
                    conversation.audience_kind,
                    conversation.audience_namespace,
                    list(conversation.audience_readers),
                )
            )
        load_rows(rows)
    return agent


#: The benchmark corpus is lexical only: queuing embedding work for it would only fill the outbox.
NO_INDEX_WORK = ("history.Message:enqueue_index_work", "memory.MemoryRevision:enqueue_index_work")


def load_rows(rows: list[tuple[Any, ...]]) -> None:
    """Write one message, its evidence, one entry and its first revision per staged row."""
    with pgtrigger.ignore(*NO_INDEX_WORK), connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_stage")
        cursor.execute(
            "CREATE TEMP TABLE bench_stage (agent_id bigint, conversation_id bigint, actor_id bigint,"
            " subject_id bigint, body text, belief_type text, confidence float8, salience float8,"
            " always_on boolean, lifecycle text, origin_scope text, created_at timestamptz, audience_kind text,"
            " audience_namespace text, audience_readers bigint[], message_id bigint, entry_id bigint,"
            " revision_id bigint) ON COMMIT DROP"
        )
        raw = cursor.cursor  # the psycopg cursor underneath Django's wrapper, for COPY
        with raw.copy(f"COPY bench_stage ({STAGE_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            "UPDATE bench_stage SET"
            " message_id = nextval(pg_get_serial_sequence('history_message', 'id')),"
            " entry_id = nextval(pg_get_serial_sequence('memory_memoryentry', 'id')),"
            " revision_id = nextval(pg_get_serial_sequence('memory_memoryrevision', 'id'))"
        )
        audience = "audience_kind, audience_namespace, audience_readers"
        cursor.execute(
            "INSERT INTO history_message (id, agent_id, conversation_id, actor_id, direction, external_id, body,"
            f" created_at, ingested_at, history_message_ids, memory_revision_ids, cited_revision_ids, {audience})"
            " SELECT message_id, agent_id, conversation_id, actor_id, 'inbound', NULL, body, created_at, created_at,"
            f" '{{}}', '{{}}', '{{}}', {audience} FROM bench_stage"
        )
        cursor.execute(
            "INSERT INTO history_messagesourceevidence (message_id, method, detail, recorded_at)"
            " SELECT message_id, 'connector_signed', '{\"bench\": true}', created_at FROM bench_stage"
        )
        cursor.execute(
            "INSERT INTO memory_memoryentry (id, agent_id, status, current_revision_id, flagged_for_review,"
            " utility, last_used_at, created_at, forgotten_at)"
            " SELECT entry_id, agent_id, 'live', NULL, false, 0, NULL, created_at, NULL FROM bench_stage"
        )
        cursor.execute(
            "INSERT INTO memory_memoryrevision (id, entry_id, agent_id, number, body, subject_id, source_actor_id,"
            " source_actor_ids, belief_type, portability, origin_scope, confidence, authority, salience, always_on,"
            " lifecycle, valid_from, valid_to, recorded_at, supersedes_id, restricted_to_conversation_id, created_by,"
            f" turn_id, created_by_user_id, created_at, {audience})"
            " SELECT revision_id, entry_id, agent_id, 1, body, subject_id, actor_id,"
            " CASE WHEN actor_id IS NULL THEN '{}'::bigint[] ELSE ARRAY[actor_id] END, belief_type, 'portable',"
            " origin_scope, confidence, 'user_stated', salience, always_on, lifecycle, created_at, NULL, created_at,"
            f" NULL, NULL, 'import', NULL, NULL, created_at, {audience} FROM bench_stage"
        )
        cursor.execute(
            "INSERT INTO memory_memoryevidence (revision_id, kind, message_id, parent_revision_id, operator_id,"
            f" created_at, {audience})"
            f" SELECT revision_id, 'source_message', message_id, NULL, NULL, created_at, {audience} FROM bench_stage"
        )
        cursor.execute(
            "UPDATE memory_memoryentry e SET current_revision_id = s.revision_id FROM bench_stage s"
            " WHERE e.id = s.entry_id"
        )


# --------------------------------------------------------------------------------------------------
# questions
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    agent_index: int
    conversation: Conversation
    requester_id: int
    text: str


@dataclass
class Bench:
    rng: random.Random
    conversations: list[list[Conversation]]
    people: list[list[Actor]]
    bodies: list[list[str]]
    vocabulary: list[tuple[list[str], list[int]]]
    #: False times the lexical path alone (this command); True adds the configured semantic arm.
    semantic: bool = False

    @classmethod
    def load(cls, agents: list[RuntimeAgent], rng: random.Random) -> Bench:
        conversations, people, bodies, vocabulary = [], [], [], []
        for agent in agents:
            conversations.append(list(Conversation.objects.filter(agent=agent).order_by("pk")))
            people.append(list(Actor.objects.filter(connector__agent=agent).order_by("pk")))
            texts = list(agent.memory_entries.order_by("pk").values_list("current_revision__body", flat=True)[:2_000])
            counts = Counter(word for text in texts if text for word in set(content_terms(text)))
            words = sorted(counts)
            bodies.append([t for t in texts if t])
            vocabulary.append((words, [counts[w] for w in words]))
        return cls(rng=rng, conversations=conversations, people=people, bodies=bodies, vocabulary=vocabulary)

    def question(self) -> Question:
        index = self.rng.randrange(len(self.conversations))
        conversation = self.rng.choice(self.conversations[index])
        readers = conversation.audience_readers or [p.pk for p in self.people[index]]
        size = self.rng.randint(1, 4)
        if self.rng.random() < 0.5:
            # About one remembered fact: words that occur together.
            terms = content_terms(self.rng.choice(self.bodies[index]))
            words = self.rng.sample(terms, min(size, len(terms)))
        else:
            # Loose words, as common as they are in the corpus.
            vocabulary, weights = self.vocabulary[index]
            words = self.rng.choices(vocabulary, weights=weights, k=size)
        return Question(index, conversation, self.rng.choice(readers), " ".join(words))

    def time(self, question: Question, *, sourced: bool = False) -> tuple[float, int]:
        """One recall's wall time and items; ``sourced`` adds the source arm (over the messages' words
        alone) to the lexical path."""
        query = form_query(
            message=question.text, requester_id=question.requester_id, known_actors=self.people[question.agent_index]
        )
        perspective = perspective_for_conversation(question.conversation, requester_id=question.requester_id)
        providers: list[RecallProvider] | None = None if self.semantic else []
        if sourced and providers is not None:
            providers.append(SourceMessages(()))
        started = time.perf_counter()
        result = recall(perspective=perspective, query=query, budget=task_budget(), providers=providers)
        return (time.perf_counter() - started) * 1000, len(result.items)

    def run_one(self) -> None:
        self.time(self.question())

    def explain(self, question: Question) -> str:
        """Per-statement timings of one recall, then EXPLAIN ANALYZE of its arms statement."""
        with CaptureQueriesContext(connection) as captured:
            self.time(question)
        lines = [f"  {float(q['time']) * 1000:8.2f} ms  {q['sql'][:110]}" for q in captured.captured_queries]
        arms = next(
            (q["sql"] for q in captured.captured_queries if " hits(" in q["sql"] or " hits AS" in q["sql"]), None
        )
        if arms is None:
            return "\n".join([*lines, "(no arms statement captured)"])
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {arms}")
            plan = [row[0] for row in cursor.fetchall()]
        return "\n".join([*lines, "arms statement plan:", *plan])
