"""``manage.py bench_embed``: embedding throughput of one worker process, its peak memory, and memory
recall p95 with the semantic arm on over the ``bench_recall`` corpus (100,000 revisions by default).

Throughput is measured in a separate process that does what a worker does (one model session, the
configured batch size and thread count) on real conversation text, so its peak memory is the
worker's own. The corpus vectors are computed once and reused by later runs. The last line is one
JSON object: ``{"texts_per_s": …, "worker_peak_mb": …, "recall_p95_ms": …}``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction
from tqdm import tqdm

from memory.bench.corpus import locomo_dev_path
from memory.bench.stats import percentile
from memory.embeddings.index import _embed_revisions, ensure_generation, semantic_enabled
from memory.management.commands.bench_recall import WARMUP, Bench, Spec, ensure_corpus
from memory.models import MemoryRevision, RevisionEmbedding

WORKER_SCRIPT = """
import json, resource, sys, time
import django
django.setup()
from django.conf import settings
from history.locomo import load_locomo
from memory.embeddings.model import embedding_model

count = int(sys.argv[1])
texts = [t.text for c in load_locomo(sys.argv[2]).conversations for t in c.turns][:count]
while len(texts) < count:
    texts += texts[: count - len(texts)]
model = embedding_model()
model.embed(texts[:8])  # load the session before timing
batch = settings.ENGRAM_EMBEDDING_BATCH
started = time.perf_counter()
for start in range(0, len(texts), batch):
    model.embed(texts[start : start + batch])
elapsed = time.perf_counter() - started
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"texts": len(texts), "seconds": elapsed, "peak_mb": peak_mb}))
"""


class Command(BaseCommand):
    help = "Embedding throughput per worker, worker peak memory, and recall p95 with the semantic arm."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--texts", type=int, default=4_096, help="Texts the worker process embeds.")
        parser.add_argument("--revisions", type=int, default=100_000, help="Corpus size (bench_recall's).")
        parser.add_argument("--agents", type=int, default=20)
        parser.add_argument("--queries", type=int, default=300)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--locomo", default=str(locomo_dev_path()))

    def handle(self, *args: Any, **options: Any) -> None:
        worker = worker_throughput(options["texts"], options["locomo"])
        texts_per_s = worker["texts"] / worker["seconds"]
        self.stdout.write(
            f"worker: {worker['texts']} texts in {worker['seconds']:.1f}s = {texts_per_s:.0f} texts/s "
            f"(batch {settings.ENGRAM_EMBEDDING_BATCH}, {settings.ENGRAM_EMBEDDING_THREADS} thread(s)); "
            f"peak RSS {worker['peak_mb']:.0f} MB"
        )
        result: dict[str, Any] = {"texts_per_s": round(texts_per_s, 1), "worker_peak_mb": round(worker["peak_mb"], 1)}
        if not semantic_enabled():
            self.stdout.write("semantic search is off on this database (no pgvector): recall not measured")
            result["recall_p95_ms"] = None
        else:
            spec = Spec(revisions=options["revisions"], agents=options["agents"], seed=options["seed"])
            agents, _ = ensure_corpus(spec)
            embed_corpus(agents, self.stdout.write)
            p50, p95 = self.time_recall(agents, spec, options["queries"])
            result.update(recall_p50_ms=round(p50, 3), recall_p95_ms=round(p95, 3), revisions=spec.revisions)
        self.stdout.write(json.dumps(result))

    def time_recall(self, agents: list[Any], spec: Spec, queries: int) -> tuple[float, float]:
        bench = Bench.load(agents, random.Random(spec.seed * 7919 + queries))
        bench.semantic = True
        for _ in range(WARMUP):
            bench.run_one()
        values = sorted(bench.time(bench.question())[0] for _ in range(queries))
        p50, p95 = percentile(values, 50), percentile(values, 95)
        self.stdout.write(f"recall with the semantic arm x{len(values)}: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
        return p50, p95


def worker_throughput(texts: int, locomo: str) -> dict[str, float]:
    """Embed ``texts`` LoCoMo turns in a process of their own, as one worker does: ``texts``, ``seconds``
    (the embedding alone, the model loaded) and the process's ``peak_mb``."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    completed = subprocess.run(
        [sys.executable, "-c", WORKER_SCRIPT, str(texts), locomo],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


def embed_corpus(agents: list[Any], write: Callable[[str], Any]) -> None:
    """Vectors of the live generation for every revision of ``agents`` that has none yet."""
    generation = ensure_generation()
    missing = MemoryRevision.objects.filter(agent__in=agents).exclude(
        pk__in=RevisionEmbedding.objects.filter(generation=generation).values("revision_id")
    )
    total = missing.count()
    if not total:
        write("corpus vectors reused")
        return
    started = time.perf_counter()
    bar = tqdm(total=total, unit="rev", desc="embedding corpus", disable=None)
    last_id = 0
    while batch := list(missing.filter(pk__gt=last_id).order_by("pk").only("id", "agent_id", "body")[:256]):
        with transaction.atomic():
            _embed_revisions(generation, batch)
        last_id = batch[-1].pk
        bar.update(len(batch))
    bar.close()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_revisionembedding")
    write(f"embedded {total} revisions in {time.perf_counter() - started:.1f}s")
