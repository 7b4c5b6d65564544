"""``manage.py bench_semantic --against PATH``: semantic recall p95 and history search p95 (semantic arm on)
of this code against another checkout of Engram, side by side on one corpus.

The corpus is ``bench_embed``'s (``bench_recall``'s revisions and the messages they were learned from, with
vectors of the live generation) plus
a ``bench_history`` transcript whose messages get vectors too. Each checkout runs in its own process,
started with this interpreter in that checkout's folder and pointed at this process's database; the two
take blocks of ``--block`` recalls and history searches in turn (A B B A A B …), each asking the same
questions in the same order, so a drift of the machine's speed falls on both alike and each is the
second to ask a question (into caches the first warmed) equally often. Without
``--against`` only this code is timed. The last line is one JSON object:
``{"this": {"recall_p95_ms", "history_p95_ms", …}, "against": {…}, "ratio": {"recall_p95", "history_p95"}}``
(ratios are this code's p95 over the other's: below 1 is faster).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from tqdm import tqdm

from bench.harness.corpus import settle
from bench.harness.server import server_env
from bench.harness.stats import percentile
from bench.management.commands import bench_history, bench_recall
from bench.management.commands.bench_embed import embed_corpus
from history.models import Message
from memory.embeddings.index import _embed_messages, ensure_generation, semantic_enabled
from memory.models import MessageEmbedding

WORKER_SCRIPT = """
import json, random, sys, time
import django
django.setup()
try:
    from bench.management.commands import bench_history, bench_recall
    from memory.retrieval.history_search import HistoryQuery, search_history
except ImportError:  # a checkout from before the bench app held the benchmark commands
    from history.management.commands import bench_history
    from history.search import HistoryQuery, search_history
    from memory.management.commands import bench_recall
from history.models import Conversation
from memory.retrieval.eligibility import perspective_for_conversation
from accounts.models import RuntimeAgent

recall_agents = [RuntimeAgent.objects.get(pk=pk) for pk in json.loads(sys.argv[1])]
history_agents = [RuntimeAgent.objects.get(pk=pk) for pk in json.loads(sys.argv[2])]
seed = int(sys.argv[3])
recall = bench_recall.Bench.load(recall_agents, random.Random(seed))
recall.semantic = True
history = bench_history.ServiceBench.load(history_agents, random.Random(seed + 1))

def search(question):
    perspective = perspective_for_conversation(question.conversation, requester_id=question.requester_id)
    started = time.perf_counter()
    search_history(perspective=perspective, query=HistoryQuery(text=question.text))  # semantic arm on
    return (time.perf_counter() - started) * 1000

print("ready", flush=True)
for line in sys.stdin:
    count = int(line)
    recalls = [recall.time(recall.question())[0] for _ in range(count)]
    searches = [search(history.question()) for _ in range(count)]
    print(json.dumps({"recall": recalls, "history": searches}), flush=True)
"""


class Worker:
    """One checkout's timing process."""

    def __init__(self, checkout: Path, recall_agents: list[int], history_agents: list[int], seed: int) -> None:
        env = server_env(Path(tempfile.mkdtemp(prefix="engram-bench-broker-")))
        env["ENGRAM_VAR_DIR"] = str(settings.VAR_DIR)  # the embedded server this process uses
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, json.dumps(recall_agents), json.dumps(history_agents), str(seed)],
            cwd=checkout,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise CommandError(f"the timing process of {checkout} failed to start")
        self.recall: list[float] = []
        self.history: list[float] = []

    def block(self, count: int, *, counted: bool = True) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        timings = json.loads(self.process.stdout.readline())
        if counted:
            self.recall += timings["recall"]
            self.history += timings["history"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)

    def figures(self) -> dict[str, Any]:
        recall, history = sorted(self.recall), sorted(self.history)
        return {
            "recalls": len(recall),
            "recall_p50_ms": round(percentile(recall, 50), 3),
            "recall_p95_ms": round(percentile(recall, 95), 3),
            "searches": len(history),
            "history_p50_ms": round(percentile(history, 50), 3),
            "history_p95_ms": round(percentile(history, 95), 3),
        }


class Command(BaseCommand):
    help = "Semantic recall p95 and history search p95 of this code against another checkout, alternating."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--against", type=Path, default=None, help="Another checkout of Engram.")
        parser.add_argument("--revisions", type=int, default=100_000, help="bench_embed's corpus size.")
        parser.add_argument("--agents", type=int, default=20)
        parser.add_argument("--messages", type=int, default=20_000, help="Transcript messages, with vectors.")
        parser.add_argument("--history-agents", type=int, default=4)
        parser.add_argument("--blocks", type=int, default=10, help="Counted blocks per checkout.")
        parser.add_argument("--block", type=int, default=30, help="Recalls and searches per block.")
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args: Any, **options: Any) -> None:
        against: Path | None = options["against"]
        if against is not None and not (against / "config" / "wsgi.py").is_file():
            raise CommandError(f"--against {against}: not a checkout of Engram (no config/wsgi.py)")
        if not semantic_enabled():
            raise CommandError("semantic search is off on this database (no pgvector): nothing to compare")
        recall_spec = bench_recall.Spec(revisions=options["revisions"], agents=options["agents"], seed=options["seed"])
        recall_agents, _ = bench_recall.ensure_corpus(recall_spec)
        embed_corpus(recall_agents, self.stdout.write)
        # The messages the memories were learned from, too: recall's source arm reads their vectors.
        embed_messages(recall_agents)
        history_spec = bench_history.Spec(
            messages=options["messages"], agents=options["history_agents"], seed=options["seed"]
        )
        history_agents, _ = bench_history.ensure_corpus(history_spec, bench_history.locomo_texts())
        embed_messages(history_agents)
        settle()
        settle(("memory_revisionembedding", "memory_messageembedding"))

        ids = ([a.pk for a in recall_agents], [a.pk for a in history_agents])
        checkouts = [Path(settings.BASE_DIR), *([against.resolve()] if against is not None else [])]
        workers = [Worker(checkout, *ids, options["seed"]) for checkout in checkouts]
        try:
            for worker in workers:  # warm-up: connections, plans, the model session
                worker.block(options["block"], counted=False)
            for round_ in tqdm(range(options["blocks"]), desc="blocks", disable=None):
                # A B, then B A: whichever runs second asks questions the first has just warmed the
                # database's caches for, so each goes second equally often.
                for worker in workers if round_ % 2 == 0 else workers[::-1]:
                    worker.block(options["block"])
        finally:
            for worker in workers:
                worker.close()

        result: dict[str, Any] = {"this": workers[0].figures()}
        self.stdout.write(f"this code ({checkouts[0]}): {result['this']}")
        if against is not None:
            result["against"] = {"code": str(checkouts[1]), **workers[1].figures()}
            result["ratio"] = {
                key: round(result["this"][f"{key}_ms"] / result["against"][f"{key}_ms"], 3)
                for key in ("recall_p95", "history_p95")
            }
            self.stdout.write(f"against ({checkouts[1]}): {result['against']}")
            self.stdout.write(f"this / against, p95: {result['ratio']}")
        self.stdout.write(json.dumps(result))


def embed_messages(agents: list[Any]) -> None:
    """Vectors of the live generation for every message of ``agents`` that has none yet."""
    generation = ensure_generation()
    missing = Message.objects.filter(agent__in=agents).exclude(
        pk__in=MessageEmbedding.objects.filter(generation=generation).values("message_id")
    )
    bar = tqdm(total=missing.count(), unit="msg", desc="embedding transcript", disable=None)
    last_id = 0
    started = time.perf_counter()
    while batch := list(missing.filter(pk__gt=last_id).order_by("pk").only("id", "agent_id", "body")[:256]):
        with transaction.atomic():
            _embed_messages(generation, batch)
        last_id = batch[-1].pk
        bar.update(len(batch))
    bar.close()
    bar.write(f"transcript vectors ready in {time.perf_counter() - started:.1f}s")
