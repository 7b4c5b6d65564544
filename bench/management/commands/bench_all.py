"""The whole benchmark in one command: ``bench_all [--scale 1.0] [--repeats 3] [--seed 1]``.

Corpus. At ``--scale 1`` it is 1,000,000 messages and 200,000 memory revisions over 100 agents in 20
tenants (five agents a tenant); ``--scale`` multiplies all four (at least 10 agents in 2 tenants).
Each agent is built as ``bench_recall`` builds one: 40 people; public, workspace, private and direct
rooms; each memory stated in an authenticated message of one room, whose audience it inherits, the
statements drawn from templates over word lists and LoCoMo's observations. The rest of its messages
are written as ``bench_history`` writes a transcript: LoCoMo turns replayed in order from a random
point per room and said by the room's readers, with one message in five a generated statement about
someone in the room instead; busy rooms (those with more memories stated in them) get more. Every
message carries connector source evidence; the corpus is lexical, so its writes queue no embedding
work. Agent ``i`` depends only on the corpus totals, the seed and ``i`` (its name says so), which makes
the corpus reproducible and lets it grow by agents.

Sizes. The corpus is built in three steps, the first hundredth of the agents (tenants join in
order), the first tenth, then all: at scale 1 one agent (10,000 messages), 10 agents (100,000) and
100 agents (1,000,000). A size holds at least one agent, and sizes that round to the same number of
agents are measured once (at 10 agents: 1 and 10). Each step is built in one transaction and each
size is measured as soon as it is built, so the database then holds exactly that corpus: the
latency-against-size plot. A second run finds the agents and reuses them (the smaller sizes are then
measured over their agents inside the whole corpus).

Measured at each size, as medians over ``--repeats`` repetitions (each of Q questions, after a
warm-up), on the size's agents: memory recall (lexical) and history search p50/p95 with, for every
question, the bare sidecar SQL it rests on; the bare sidecar query for a rare and a common term
(``bench_history``: median of repeated executions); the database size. Beside history search, every
question is also asked of a plain PostgreSQL full-text baseline over the same messages: an UNLOGGED
table ``bench_plain_fts`` (message id, agent, body and ``to_tsvector('english', body)``, a GIN index
on the vector and a btree on the agent) filled from the size's messages, searched within the
question's agent and ranked by ``ts_rank``, top 10, once with all the question's terms
(``plainto_tsquery``) and once with any of them (the same terms OR-ed, as a plain search box does).
It has no eligibility, no audience and no trace: what a search without Engram's rules costs. The
table is created for each size and dropped before the size's database size is read, so the product
schema never holds it. At the full size also:

- memory recall p50/p95 with the semantic arm (hybrid) over the first size's agents, whose revisions
  are embedded once and kept (``bench_embed``);
- full HTTP turns p50/p95 through gunicorn, spread over conversations (``bench_turn``: start, round,
  ledger and reply; each step, ingest included, in ``steps``), their recall and history search with
  the semantic arms on once a live embedding generation exists;
- ingest throughput: messages/s through ``messages_ingest_batch`` in batches of 500 into existing
  conversations, and through bare INSERTs of the same rows, both rolled back (so the commit is not
  timed, and a rerun finds the corpus as it was);
- embedding throughput of one worker, its pool of one process per core (``bench_embed``);
- recall@k (k = 1-20) on LoCoMo, as ``eval_locomo`` scores it, for turns (history search) and
  observations (memory recall), lexical and, where the database has pgvector, hybrid; rolled back.

Questions, turns, ingested messages and embedded texts per repetition follow the square root of
``--scale`` (300, 200, 10,000 and 2,048 at scale 1), so small runs stay short and large ones steady.
The service / bare SQL ratios say what each service call adds to the statement it rests on: its
eligibility checks, ranking, rendering, trace and audit rows. Only ratios between figures measured in
one run compare across machines (their speed moves between boots by up to three times), so the result
collects them in ``ratios``: per size, each service call's p50 over its bare SQL's p50 and history
search's p95 over the plain baseline's p95 (both variants); at the full size, hybrid recall's and
ingest's overhead; and the p95 growth of recall, history search and the plain baseline from the
first size to each larger one (10,000 to 100,000 and 1,000,000 messages at scale 1).

It migrates the database first, so it runs from an empty ``ENGRAM_VAR_DIR``. It writes
``bench_all.json``, ``bench_all.md`` and two PNG plots under ``--out`` (``bench/`` in the
``ENGRAM_VAR_DIR``, ``var/bench/`` by default) and prints the JSON result as its last line.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pgtrigger
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Count
from pgvector.django import CosineDistance
from tqdm import tqdm

from accounts.models import Actor, RuntimeAgent, Tenant
from bench.evaluation import OVERALL_CATEGORIES, Evaluation, QuestionScore, recall_at_k
from bench.harness.corpus import CorpusSpec, locomo_dev_path, settle
from bench.harness.machine import cpu_probe_seconds
from bench.harness.report import ratio_table, write_report
from bench.harness.stats import percentile
from bench.locomo import LocomoConversation, load_locomo
from bench.management.commands import bench_history, bench_recall, bench_turn
from bench.management.commands.bench_embed import embed_corpus, pool_rate, worker_throughput
from bench.management.commands.eval_locomo import evaluate_conversation
from history.models import Conversation, Message, agent_terms_match
from history.services import IngestItem, messages_ingest_batch
from memory.embeddings.index import live_generation, semantic_enabled
from memory.embeddings.model import embedding_model
from memory.models import MemoryEntry, RevisionEmbedding, typed_vector
from memory.retrieval.history_search import MAX_LIMIT

TENANT_PREFIX = "bench-all"
DEFAULTS = {"messages": 1_000_000, "revisions": 200_000, "agents": 100, "tenants": 20}
MIN_AGENTS, MIN_TENANTS = 10, 2
SIZE_FRACTIONS = (1 / 100, 1 / 10, 1)
#: Share of an agent's chat messages that are generated statements rather than LoCoMo turns.
VARIATION = 0.2
#: Questions per repetition, turns per repetition and texts the embedding worker embeds, at scale 1;
#: they follow the square root of the scale, so small runs stay short and large ones stay steady.
QUERIES, TURNS, EMBED_TEXTS = 300, 200, 2_048
INGEST_MESSAGES, INGEST_BATCH = 10_000, 500
TURN_WARMUP = 10
K = MAX_LIMIT
#: The revision sidecar's query, written as ``bench_history.BARE_SQL`` is (its parameters too), and
#: ranked as recall's lexical arm ranks (``memory.retrieval.arms.LEXICAL_RANK``).
RECALL_BARE_SQL = (
    "SELECT d.revision_id FROM memory_revisionsearchdocument d"
    f" WHERE {agent_terms_match('%s', '%s')}"
    " ORDER BY ts_rank(d.tsv, engram_search_query(%s)) DESC LIMIT 200"
)
#: An index a plan reads, in ``EXPLAIN`` text.
PLAN_INDEX = re.compile(r"Index (?:Only )?Scan (?:using|on) (\w+)")
HISTORY_TABLES = ("history_message", "history_messagesearchdocument", "history_messagesourceevidence")
#: The plain full-text baseline: a table outside the product schema, created and dropped per size.
PLAIN_TABLE = "bench_plain_fts"
PLAIN_LIMIT = 10
PLAIN_BUILD = (
    f"DROP TABLE IF EXISTS {PLAIN_TABLE}",
    f"CREATE UNLOGGED TABLE {PLAIN_TABLE} (id bigint PRIMARY KEY, agent_id bigint NOT NULL, body text NOT NULL,"
    " tsv tsvector NOT NULL)",
    f"INSERT INTO {PLAIN_TABLE} SELECT id, agent_id, body, to_tsvector('english', body) FROM history_message"
    " WHERE agent_id = ANY(%s)",
    f"CREATE INDEX {PLAIN_TABLE}_tsv ON {PLAIN_TABLE} USING gin (tsv)",
    f"CREATE INDEX {PLAIN_TABLE}_agent ON {PLAIN_TABLE} (agent_id)",
    f"ANALYZE {PLAIN_TABLE}",
)
#: The baseline's two queries, by variant; parameters: the question's text, then its agent. "any"
#: OR-s the lexemes ``plainto_tsquery`` AND-s (its lexemes are quoted, so the text swap is exact).
PLAIN_QUERIES = {
    variant: f"SELECT p.id FROM {PLAIN_TABLE} p, (SELECT {query} AS query) AS q"
    f" WHERE p.agent_id = %s AND p.tsv @@ q.query ORDER BY ts_rank(p.tsv, q.query) DESC LIMIT {PLAIN_LIMIT}"
    for variant, query in (
        ("all", "plainto_tsquery('english', %s)"),
        ("any", "replace(plainto_tsquery('english', %s)::text, ' & ', ' | ')::tsquery"),
    )
}
PLAIN_VARIANTS = tuple(PLAIN_QUERIES)
#: Series whose p95 growth with the corpus the result reports: (key prefix in a size's figures).
GROWTH_SERIES = ("recall_lexical", "history", *(f"plain_fts_{variant}" for variant in PLAIN_VARIANTS))


@dataclass(frozen=True)
class AllSpec(CorpusSpec):
    tenants: int = 1
    name_format = "all-r{revisions}-m{messages}-a{agents}-s{seed}-{index:03d}"

    @classmethod
    def at(cls, scale: float, seed: int) -> AllSpec:
        return cls(
            agents=max(MIN_AGENTS, round(DEFAULTS["agents"] * scale)),
            seed=seed,
            revisions=round(DEFAULTS["revisions"] * scale),
            messages=round(DEFAULTS["messages"] * scale),
            tenants=max(MIN_TENANTS, round(DEFAULTS["tenants"] * scale)),
        )

    def tenant_of(self, index: int) -> int:
        return index * self.tenants // self.agents

    def sizes(self) -> list[int]:
        """Agents in each size, smallest first."""
        return sorted({max(1, round(self.agents * fraction)) for fraction in SIZE_FRACTIONS})

    def totals(self, agents: int) -> tuple[int, int]:
        """Messages and revisions of the first ``agents`` agents."""
        return (
            sum(self.messages_of(i) for i in range(agents)),
            sum(self.revisions_of(i) for i in range(agents)),
        )


@dataclass
class Timed:
    """Service and bare SQL wall times of one repetition's questions, in ms."""

    service: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    #: The plain full-text baseline's times of the same questions, by variant (history search only).
    plain: dict[str, list[float]] = field(default_factory=dict)


def _median_percentile(runs: list[list[float]], p: int) -> float:
    return round(statistics.median(percentile(sorted(values), p) for values in runs), 3)


def summarise(runs: list[Timed]) -> dict[str, float]:
    """Median over the repetitions of each one's p50 and p95, of the bare SQL's p50 and, where the
    plain baseline was asked too, of its p50 and p95 (``plain_fts_<variant>_*``)."""
    figures = {
        "p50_ms": _median_percentile([r.service for r in runs], 50),
        "p95_ms": _median_percentile([r.service for r in runs], 95),
        "bare_p50_ms": _median_percentile([r.bare for r in runs], 50),
    }
    for variant in runs[0].plain:
        for p in (50, 95):
            figures[f"plain_fts_{variant}_p{p}_ms"] = _median_percentile([r.plain[variant] for r in runs], p)
    return figures


def size_ratios(size: dict[str, Any]) -> dict[str, float | None]:
    """One size's ratios: each service call's p50 over its bare SQL's p50, and history search's p95
    over the plain baseline's p95, by variant."""
    return {
        "recall_lexical": _ratio(size["recall_lexical_p50_ms"], size["recall_lexical_bare_p50_ms"]),
        "history": _ratio(size["history_p50_ms"], size["history_bare_p50_ms"]),
        **{
            f"history_vs_plain_fts_{variant}_p95": _ratio(size["history_p95_ms"], size[f"plain_fts_{variant}_p95_ms"])
            for variant in PLAIN_VARIANTS
        },
    }


def p95_growth(sizes: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each series' p95 at each size over its p95 at the first (smallest) size, aligned with ``messages``."""
    first = sizes[0]
    growth: dict[str, list[Any]] = {"messages": [size["messages"] for size in sizes]}
    for key in GROWTH_SERIES:
        growth[key] = [_ratio(size[f"{key}_p95_ms"], first[f"{key}_p95_ms"]) for size in sizes]
    return growth


def scaled(count: int, scale: float, floor: int) -> int:
    return max(floor, round(count * math.sqrt(scale)))


class Command(BaseCommand):
    help = "Build (once) a synthetic corpus at a chosen scale and report every benchmark figure, with plots."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scale", type=float, default=1.0, help="Multiplier of the default corpus (1M messages, 100 agents)."
        )
        parser.add_argument("--repeats", type=int, default=3, help="Repetitions each figure is the median of.")
        parser.add_argument("--queries", type=int, help="Questions per repetition (default: 300 x sqrt(scale)).")
        parser.add_argument("--turns", type=int, help="HTTP turns per repetition (default: 200 x sqrt(scale)).")
        parser.add_argument("--seed", type=int, default=1, help="Seed of the corpus and of the questions.")
        parser.add_argument("--locomo", default=None, help="LoCoMo-format file (default: shared/bench's dev file).")
        parser.add_argument("--out", default=None, help="Folder of the results (default: var/bench/).")

    def handle(self, *args: Any, **options: Any) -> None:
        scale, repeats = options["scale"], options["repeats"]
        if not scale > 0 or repeats < 1:
            raise CommandError("need --scale > 0 and --repeats >= 1")
        spec = AllSpec.at(scale, options["seed"])
        if spec.revisions < spec.agents or spec.messages < spec.revisions:
            raise CommandError(f"--scale {scale} is too small: need a revision per agent ({spec.agents} agents)")
        queries = options["queries"] or scaled(QUERIES, scale, 10)
        turns = options["turns"] or scaled(TURNS, scale, 5)
        locomo = Path(options["locomo"]) if options["locomo"] else locomo_dev_path()
        if not locomo.exists():
            raise CommandError(f"{locomo} is missing: the corpus and the recall@k curves are built from it")
        out = Path(options["out"]) if options["out"] else Path(settings.VAR_DIR) / "bench"
        quiet = options["verbosity"] < 1
        started, load_before, probe_before = time.monotonic(), os.getloadavg()[0], cpu_probe_seconds()
        started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

        # One command from an empty ENGRAM_VAR_DIR to the report: the schema first (a no-op when current).
        call_command("migrate", verbosity=0)
        corpus = Corpus(spec, locomo)
        sizes: list[dict[str, Any]] = []
        built_any = False
        agents: list[RuntimeAgent] = []
        for upto in spec.sizes():
            step = time.monotonic()
            agents, built = corpus.ensure(upto, quiet=quiet)
            built_any |= built
            settle()
            messages, revisions = spec.totals(upto)
            self.stdout.write(
                f"corpus {'built' if built else 'reused'}: {upto} agents, {messages:,} messages, {revisions:,} "
                f"revisions in {time.monotonic() - step:.1f} s"
            )
            size = measure_size(agents, random.Random(spec.seed * 7919 + upto), queries=queries, repeats=repeats)
            size.update(agents=upto, messages=messages, revisions=revisions)
            sizes.append(size)
            self.stdout.write(
                f"  recall p50 {size['recall_lexical_p50_ms']:.2f} ms, p95 {size['recall_lexical_p95_ms']:.2f} ms; "
                f"history p50 {size['history_p50_ms']:.2f} ms, p95 {size['history_p95_ms']:.2f} ms; "
                f"SQL rare {size['sql_rare_ms']:.3f} ms, common {size['sql_common_ms']:.3f} ms; "
                f"plain FTS p95 all terms {size['plain_fts_all_p95_ms']:.2f} ms, "
                f"any term {size['plain_fts_any_p95_ms']:.2f} ms; database {size['db_mb']:,.0f} MB"
            )
            ratios = size_ratios(size)
            self.stdout.write(
                f"  ratios: recall / bare SQL {ratios['recall_lexical']}, history / bare SQL {ratios['history']} "
                f"(p50); history / plain FTS p95 all terms {ratios['history_vs_plain_fts_all_p95']}, "
                f"any term {ratios['history_vs_plain_fts_any_p95']}"
            )
        full = sizes[-1]

        embedded = agents[: spec.sizes()[0]]
        hybrid = self.hybrid_recall(embedded, spec, queries, repeats)
        ingest = time_ingest(agents[0], scaled(INGEST_MESSAGES, scale, INGEST_BATCH), repeats)
        self.stdout.write(
            f"ingest: {ingest['service']:,.0f} messages/s through the service, {ingest['bare']:,.0f} as bare SQL"
        )
        texts = scaled(EMBED_TEXTS, scale, 64)
        pool = os.cpu_count() or 1
        rates = [pool_rate(worker_throughput(texts, str(locomo), pool)) for _ in range(repeats)]
        embed_rate = statistics.median(rates)
        self.stdout.write(
            f"embedding: {embed_rate:.1f} texts/s in one worker of {pool} pool processes ({texts} texts each a repeat)"
        )
        curves = self.locomo_curves(locomo, quiet=quiet)
        turn = self.http_turns(agents[0], spec, turns, repeats)

        result: dict[str, Any] = {
            "scale": scale,
            "seed": spec.seed,
            "repeats": repeats,
            "queries": queries,
            "turns": turns,
            "corpus": {
                "messages": spec.messages,
                "revisions": spec.revisions,
                "agents": spec.agents,
                "tenants": spec.tenants,
                "status": "built" if built_any else "reused",
            },
            "sql_rare_term": full["sql_rare_term"],
            "sql_rare_ms": full["sql_rare_ms"],
            "sql_common_term": full["sql_common_term"],
            "sql_common_ms": full["sql_common_ms"],
            "sql_indexes": full["sql_indexes"],
            **{f"recall_lexical_{k}": full[f"recall_lexical_{k}"] for k in ("p50_ms", "p95_ms", "bare_p50_ms")},
            **{f"recall_hybrid_{k}": hybrid.get(k) for k in ("p50_ms", "p95_ms", "bare_p50_ms")},
            **{f"history_{k}": full[f"history_{k}"] for k in ("p50_ms", "p95_ms", "bare_p50_ms")},
            "turn_p50_ms": turn["p50_ms"],
            "turn_p95_ms": turn["p95_ms"],
            "turn_steps": turn["steps"],
            # With a live generation the turns' recall and history search run their semantic arms too.
            "turn_semantic": semantic_enabled() and live_generation() is not None,
            "ingest_messages_per_s": round(ingest["service"], 1),
            "ingest_bare_messages_per_s": round(ingest["bare"], 1),
            "embed_texts_per_s": round(embed_rate, 1),
            "embedded_agents": len(embedded),
            "embedded_revisions": sum(spec.revisions_of(i) for i in range(len(embedded))),
            "db_mb": full["db_mb"],
            "db_mb_per_million_messages": full["db_mb_per_million_messages"],
            "history_mb_per_million_messages": full["history_mb_per_million_messages"],
            "overhead": {
                "recall_lexical": _ratio(full["recall_lexical_p50_ms"], full["recall_lexical_bare_p50_ms"]),
                "recall_hybrid": _ratio(hybrid.get("p50_ms"), hybrid.get("bare_p50_ms")),
                "history": _ratio(full["history_p50_ms"], full["history_bare_p50_ms"]),
                "ingest": _ratio(ingest["bare"], ingest["service"]),
            },
            "sizes": [
                {key: size[key] for key in size if key not in ("sql_rare_term", "sql_common_term", "sql_indexes")}
                for size in sizes
            ],
            "locomo": curves,
        }
        # The ratios between figures of this one run: the results that compare across machines.
        result["ratios"] = {
            "full": dict(result["overhead"]),
            "sizes": [{"agents": size["agents"], "messages": size["messages"], **size_ratios(size)} for size in sizes],
            "p95_growth": p95_growth(sizes),
        }
        result["run"] = {
            "command": command_line(options),
            "started_at": started_at,
            "seconds": round(time.monotonic() - started, 1),
            "host": socket.gethostname(),
            "cpus": os.cpu_count(),
            "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "cpu_probe_s": {"before": probe_before, "after": cpu_probe_seconds()},
            "postgres": postgres_version(),
        }
        out.mkdir(parents=True, exist_ok=True)
        paths = write_report(result, out)
        result["files"] = {kind: str(path) for kind, path in paths.items()} | {"json": str(out / "bench_all.json")}
        (out / "bench_all.json").write_text(json.dumps(result, indent=2) + "\n")
        for line in ratio_table(result):
            self.stdout.write(line)
        self.stdout.write(f"report: {paths['report']}")
        self.stdout.write(json.dumps(result))

    def hybrid_recall(
        self, agents: list[RuntimeAgent], spec: AllSpec, queries: int, repeats: int
    ) -> dict[str, float | None]:
        if not semantic_enabled():
            self.stdout.write("hybrid recall not measured: this database has no pgvector")
            return {}
        embed_corpus(agents, self.stdout.write)
        generation = live_generation()
        if generation is None:
            raise CommandError("no live embedding generation after embedding the corpus")
        model = embedding_model(generation.model_name)
        dims = int(generation.dims)

        def bare(question: bench_recall.Question) -> float:
            agent_id = question.conversation.agent_id
            # The agent's 50 nearest vectors, as the semantic arm orders them (no eligibility).
            nearest = (
                RevisionEmbedding.objects.filter(agent_id=agent_id, generation_id=generation.pk)
                .order_by(CosineDistance(typed_vector(dims), model.embed([question.text])[0].tolist()))
                .values_list("revision_id", flat=True)[:50]
            )
            return bare_ms(RECALL_BARE_SQL, bench_history.bare_params(agent_id, question.text)) + bare_ms(
                *nearest.query.sql_with_params()
            )

        figures = time_recall(agents, random.Random(spec.seed * 104_729), queries, repeats, semantic=True, bare=bare)
        self.stdout.write(
            f"hybrid recall over {len(agents)} embedded agent(s): p50 {figures['p50_ms']:.2f} ms, "
            f"p95 {figures['p95_ms']:.2f} ms"
        )
        return dict(figures)

    def http_turns(self, agent: RuntimeAgent, spec: AllSpec, turns: int, repeats: int) -> dict[str, Any]:
        script = bench_turn.Script.load(agent, random.Random(spec.seed * 31 + turns))
        batches = bench_turn.drive_turns(agent, script, batches=[turns] * repeats, warmup=TURN_WARMUP)
        runs = [bench_turn.turn_figures(batch.timings) for batch in batches]
        figures = {
            "p50_ms": round(statistics.median(r["p50_ms"] for r in runs), 2),
            "p95_ms": round(statistics.median(r["p95_ms"] for r in runs), 2),
            "steps": {
                step: {
                    "p50_ms": round(statistics.median(r["steps"][step]["p50_ms"] for r in runs), 2),
                    "p95_ms": round(statistics.median(r["steps"][step]["p95_ms"] for r in runs), 2),
                }
                for step in bench_turn.STEPS
            },
        }
        self.stdout.write(
            f"HTTP turns ({turns} a repeat over {script.conversations} conversations): "
            f"p50 {figures['p50_ms']:.1f} ms, p95 {figures['p95_ms']:.1f} ms"
        )
        return figures

    def locomo_curves(self, locomo: Path, *, quiet: bool) -> dict[str, dict[str, Any]]:
        parsed = load_locomo(locomo)
        modes = ("lexical", "hybrid") if semantic_enabled() else ("lexical",)
        curves = {}
        for unit in ("turns", "observations"):
            for mode in modes:
                started = time.monotonic()
                curve = recall_curve(parsed.conversations, mode=mode, unit=unit, quiet=quiet)
                curves[f"{unit}/{mode}"] = curve
                at = curve["recall_at_k"]
                self.stdout.write(
                    f"LoCoMo {unit}/{mode}: {curve['questions']} questions, recall@5 {at[4]:.3f}, "
                    f"recall@10 {at[9]:.3f} ({time.monotonic() - started:.0f} s)"
                )
        return curves


def _ratio(service: float | None, bare: float | None) -> float | None:
    if service is None or not bare:
        return None
    return round(service / bare, 2)


# --------------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------------


class Corpus:
    """The spec's agents, built on demand a prefix at a time."""

    def __init__(self, spec: AllSpec, locomo: Path) -> None:
        self.spec = spec
        self.statements = bench_recall.Statements(random.Random(spec.seed))
        parsed = load_locomo(locomo)
        self.turns = [turn.text for conversation in parsed.conversations for turn in conversation.turns]
        if not self.turns:
            raise CommandError(f"{locomo} holds no turns")

    def ensure(self, upto: int, *, quiet: bool) -> tuple[list[RuntimeAgent], bool]:
        """Agents ``0 .. upto - 1``, building the missing ones in one transaction (so agents that exist
        are complete); True if any was built."""
        spec = self.spec
        names = [spec.agent_name(index) for index in range(upto)]
        existing = {
            a.name: a for a in RuntimeAgent.objects.filter(tenant__slug__startswith=TENANT_PREFIX, name__in=names)
        }
        for index, name in enumerate(names):
            agent = existing.get(name)
            if agent is not None and (
                MemoryEntry.objects.filter(agent=agent).count() != spec.revisions_of(index)
                or Message.objects.filter(agent=agent).count() < spec.messages_of(index)
            ):
                raise CommandError(f"agent {name} holds a different corpus; use a fresh database")
        missing = [index for index, name in enumerate(names) if name not in existing]
        if missing:
            # The ignore is a transaction-local setting, so it also covers the COPY of ``load_batch``.
            with (
                transaction.atomic(),
                bench_history.immediate_constraints(),
                pgtrigger.ignore(*bench_recall.NO_INDEX_WORK),
            ):
                rows: list[tuple[Any, ...]] = []
                for index in tqdm(missing, unit="agent", desc="bench_all agents", disable=True if quiet else None):
                    existing[names[index]], agent_rows = self.build(index)
                    rows.extend(agent_rows)
                # created_at is the last column: arrival order across the agents, as a live system sees it.
                rows.sort(key=lambda row: row[-1])
                with tqdm(
                    total=len(rows), unit="msg", desc="bench_all messages", disable=True if quiet else None
                ) as bar:
                    for start in range(0, len(rows), bench_history.BATCH):
                        batch = rows[start : start + bench_history.BATCH]
                        bench_history.load_batch(batch)
                        bar.update(len(batch))
        return [existing[name] for name in names], bool(missing)

    def build(self, index: int) -> tuple[RuntimeAgent, list[tuple[Any, ...]]]:
        """Agent ``index`` with its memories written, and the rows of its other messages."""
        spec = self.spec
        slug = f"{TENANT_PREFIX}-{spec.tenant_of(index):03d}"
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": f"Benchmark tenant {slug}"})
        # Each agent draws from its own seed, so it is the same whichever agents were built before it.
        self.statements.rng = random.Random(spec.seed * 1_000_003 + index)
        agent = bench_recall.build_agent(tenant, spec, index, self.statements)
        rng = random.Random(spec.seed * 2_000_003 + index)
        conversations = list(Conversation.objects.filter(agent=agent).order_by("pk"))
        stated = dict(
            Message.objects.filter(agent=agent).values_list("conversation_id").annotate(n=Count("id")).order_by()
        )
        people = list(Actor.objects.filter(connector__agent=agent).order_by("pk"))
        names = [person.display_name.split()[0] for person in people]
        texts = [
            self.statements.make(rng.choice(names), rng.choice(names)) if rng.random() < VARIATION else text
            for text in self.turns
        ]
        rows = bench_history.plan_messages(
            conversations,
            weights=[stated.get(c.pk, 0) + 1 for c in conversations],
            everyone=[person.pk for person in people],
            count=spec.messages_of(index) - spec.revisions_of(index),
            texts=texts,
            rng=rng,
        )
        return agent, rows


# --------------------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------------------


def bare_ms(sql: str, params: Sequence[Any]) -> float:
    """Wall time of one statement and its rows, in ms, as this process sees it."""
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(sql, params)
        cursor.fetchall()
        return (time.perf_counter() - started) * 1000


def measure_size(agents: list[RuntimeAgent], rng: random.Random, *, queries: int, repeats: int) -> dict[str, Any]:
    """Bare sidecar SQL, lexical recall, history search and the database size, over ``agents``."""
    figures: dict[str, Any] = {}
    probe = agents[0]
    total = Message.objects.filter(agent=probe).count()
    indexes: set[str] = set()
    for label, (term, _) in zip(("rare", "common"), bench_history.pick_terms(probe.pk, total, rng), strict=True):
        measured = bench_history.measure_sql(probe.pk, term)
        figures[f"sql_{label}_term"] = term
        figures[f"sql_{label}_ms"] = round(measured.median_ms, 3)
        indexes.update(PLAN_INDEX.findall("\n".join(measured.plan)))
    figures["sql_indexes"] = sorted(indexes)

    def recall_bare(question: bench_recall.Question) -> float:
        return bare_ms(RECALL_BARE_SQL, bench_history.bare_params(question.conversation.agent_id, question.text))

    recall_figures = time_recall(agents, rng, queries, repeats, semantic=False, bare=recall_bare)
    figures.update({f"recall_lexical_{k}": v for k, v in recall_figures.items()})
    with plain_fts(agents):
        history_figures = time_history(agents, rng, queries, repeats)
    figures.update({k if k.startswith("plain_fts_") else f"history_{k}": v for k, v in history_figures.items()})
    figures.update(database_size())
    return figures


def time_recall(
    agents: list[RuntimeAgent],
    rng: random.Random,
    queries: int,
    repeats: int,
    *,
    semantic: bool,
    bare: Callable[[bench_recall.Question], float],
) -> dict[str, float]:
    bench = bench_recall.Bench.load(agents, rng)
    bench.semantic = semantic
    for _ in range(bench_recall.WARMUP):
        bench.run_one()
    runs = []
    for _ in range(repeats):
        timed = Timed()
        for _ in range(queries):
            question = bench.question()
            timed.service.append(bench.time(question)[0])
            timed.bare.append(bare(question))
        runs.append(timed)
    return summarise(runs)


@contextmanager
def plain_fts(agents: list[RuntimeAgent]) -> Iterator[None]:
    """The plain full-text baseline's table over the messages of ``agents``, dropped on the way out."""
    try:
        with connection.cursor() as cursor:
            for statement in PLAIN_BUILD:
                cursor.execute(statement, [[agent.pk for agent in agents]] if "%s" in statement else None)
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {PLAIN_TABLE}")


def time_history(agents: list[RuntimeAgent], rng: random.Random, queries: int, repeats: int) -> dict[str, float]:
    """History search, its bare sidecar SQL and the plain baseline (``plain_fts``), each question
    asked of all three in turn."""
    bench = bench_history.ServiceBench.load(agents, rng)
    for _ in range(bench_history.WARMUP):
        question = bench.question()
        bench.time(question)
        for sql in PLAIN_QUERIES.values():
            bare_ms(sql, [question.text, question.conversation.agent_id])
    runs = []
    for _ in range(repeats):
        timed = Timed(plain={variant: [] for variant in PLAIN_VARIANTS})
        for _ in range(queries):
            question = bench.question()
            timed.service.append(bench.time(question))
            agent_id = question.conversation.agent_id
            timed.bare.append(bare_ms(bench_history.BARE_SQL, bench_history.bare_params(agent_id, question.text)))
            for variant, sql in PLAIN_QUERIES.items():
                timed.plain[variant].append(bare_ms(sql, [question.text, agent_id]))
        runs.append(timed)
    return summarise(runs)


def database_size() -> dict[str, float]:
    """The database's size, and per million messages the size of the schema's tables with their indexes
    (which leaves out the catalogue's fixed size) and of the history tables alone."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_database_size(current_database()), (SELECT count(*) FROM history_message),"
            " (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  WHERE n.nspname = current_schema() AND c.relkind = 'r'),"
            " (SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) AS t)",
            [list(HISTORY_TABLES)],
        )
        database, messages, tables, history = cursor.fetchone()
    per_million = 1_000_000 / max(1, messages) / 2**20
    return {
        "db_mb": round(database / 2**20, 1),
        "db_mb_per_million_messages": round(int(tables) * per_million, 1),
        "history_mb_per_million_messages": round(int(history) * per_million, 1),
    }


def time_ingest(agent: RuntimeAgent, messages: int, repeats: int) -> dict[str, float]:
    """Messages/s through ``messages_ingest_batch`` (batches of 500, existing rooms and people) and
    through bare INSERTs of the same rows (message and source evidence), medians over ``repeats``."""
    rng = random.Random(agent.pk)
    conversations = list(Conversation.objects.filter(agent=agent).select_related("connector").order_by("pk"))
    people = {p.pk: p for p in Actor.objects.filter(connector__agent=agent).order_by("pk")}
    turns = list(Message.objects.filter(agent=agent).order_by("pk").values_list("body", flat=True)[:1_000])
    now = datetime.now(UTC)
    plan = []
    for n in range(messages):
        conversation = rng.choice(conversations)
        readers = [people[pk] for pk in conversation.audience_readers]
        author = rng.choice(readers or list(people.values()))
        plan.append((conversation, readers, author, rng.choice(turns), now - timedelta(seconds=messages - n)))
    service, bare = [], []
    for repeat in range(repeats):
        items = [
            IngestItem(
                connector_type=c.connector.type,
                connector_name=c.connector.name,
                thread_id=c.external_thread_id,
                audience_kind=c.audience_kind,
                reader_external_ids=tuple(p.external_id for p in readers),
                actor_external_id=author.external_id,
                actor_display_name=author.display_name,
                body=body,
                created_at=at,
                evidence_method="connector_signed",
                evidence_detail={"bench": "ingest"},
                external_id=f"bench-all-ingest-{uuid.uuid4().hex[:8]}-{repeat}-{n}",
            )
            for n, (c, readers, author, body, at) in enumerate(plan)
        ]
        with transaction.atomic():
            started = time.perf_counter()
            for start in range(0, len(items), INGEST_BATCH):
                messages_ingest_batch(agent=agent, items=items[start : start + INGEST_BATCH])
            service.append(len(items) / (time.perf_counter() - started))
            transaction.set_rollback(True)
        with transaction.atomic():
            started = time.perf_counter()
            for start in range(0, len(plan), INGEST_BATCH):
                insert_bare(agent, plan[start : start + INGEST_BATCH])
            bare.append(len(plan) / (time.perf_counter() - started))
            transaction.set_rollback(True)
    return {"service": statistics.median(service), "bare": statistics.median(bare)}


def insert_bare(agent: RuntimeAgent, batch: list[tuple[Any, ...]]) -> None:
    """One batch of messages and their source evidence in two statements: what ingest must write."""
    values = []
    params: list[Any] = []
    for conversation, _, author, body, at in batch:
        values.append("(%s, %s, %s, 'inbound', NULL, %s, %s, %s, %s, %s, %s, '{}', '{}', '{}')")
        params += [agent.pk, conversation.pk, author.pk, body]
        params += [conversation.audience_kind, conversation.audience_namespace, list(conversation.audience_readers)]
        params += [at, at]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO history_message (agent_id, conversation_id, actor_id, direction, external_id, body,"
            " audience_kind, audience_namespace, audience_readers, created_at, ingested_at, history_message_ids,"
            f" memory_revision_ids, cited_revision_ids) VALUES {', '.join(values)} RETURNING id",
            params,
        )
        ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(
            "INSERT INTO history_messagesourceevidence (message_id, method, detail, recorded_at)"
            " SELECT id, 'connector_signed', '{\"bench\": \"ingest\"}', now() FROM unnest(%s::bigint[]) AS id",
            [ids],
        )


@dataclass
class RankedEvaluation(Evaluation):
    """An evaluation that also keeps every scored question's ranking, for recall at any k."""

    rankings: list[tuple[int, list[str], list[str]]] = field(default_factory=list)

    def add(self, *, category: int, ranked: Sequence[str], evidence: Any) -> QuestionScore | None:
        score = super().add(category=category, ranked=ranked, evidence=evidence)
        if score is not None:
            self.rankings.append((category, list(ranked), list(evidence)))
        return score


def recall_curve(conversations: Sequence[LocomoConversation], *, mode: str, unit: str, quiet: bool) -> dict[str, Any]:
    """recall@1..K over LoCoMo's categories 1-4, scored as ``eval_locomo`` scores; rolled back."""
    evaluation = RankedEvaluation()
    run = uuid.uuid4().hex[:12]
    total = sum(len(c.questions) for c in conversations)
    with (
        tqdm(total=total, unit="question", desc=f"LoCoMo {unit}/{mode}", disable=True if quiet else None) as bar,
        transaction.atomic(),
    ):
        for position, conversation in enumerate(conversations):
            evaluate_conversation(
                conversation,
                evaluation,
                workspace=f"{TENANT_PREFIX}-locomo-{run}-{position}",
                limit=K,
                mode=mode,
                unit=unit,
                progress=bar,
            )
        transaction.set_rollback(True)
    scored = [(ranked, evidence) for c, ranked, evidence in evaluation.rankings if c in OVERALL_CATEGORIES]
    curve = [
        round(statistics.fmean(recall_at_k(ranked, evidence, k) for ranked, evidence in scored), 4) if scored else 0.0
        for k in range(1, K + 1)
    ]
    return {"questions": len(scored), "recall_at_k": curve}


def command_line(options: dict[str, Any]) -> str:
    words = ["python manage.py bench_all", f"--scale {options['scale']:g}", f"--repeats {options['repeats']}"]
    words += [f"--{name} {options[name]}" for name in ("queries", "turns", "locomo", "out") if options[name]]
    return " ".join([*words, f"--seed {options['seed']}"])


def postgres_version() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return f"PostgreSQL {cursor.fetchone()[0]}"
