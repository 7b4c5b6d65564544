"""``manage.py bench_embed``: embedding throughput of one worker, its peak memory, and memory recall
p95 with the semantic arm on over the ``bench_recall`` corpus (100,000 revisions by default).

A worker is what ``scripts/run`` starts: one ``celery worker`` whose pool has one process per core
(Celery's default concurrency), each process with its own model session and the configured thread
count. Throughput is measured by that many separate processes embedding real conversation text at
the same time (``--processes``, default: the core count), each doing what a pool process does, so
the peak memory reported is a pool process's own. The corpus vectors are computed once and reused by
later runs. The last line is one JSON object:
``{"texts_per_s": …, "texts_per_s_per_process": …, "processes": …, "worker_peak_mb": …, "recall_p95_ms": …}``.
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

from bench.harness.corpus import locomo_dev_path, settle
from bench.harness.stats import percentile
from bench.management.commands.bench_recall import WARMUP, Bench, Spec, ensure_corpus
from memory.embeddings.index import _embed_revisions, ensure_generation, semantic_enabled
from memory.models import MemoryRevision, RevisionEmbedding

WORKER_SCRIPT = """
import json, resource, sys, time
import django
django.setup()
from django.conf import settings
from bench.locomo import load_locomo
from memory.embeddings.model import embedding_model

count = int(sys.argv[1])
texts = [t.text for c in load_locomo(sys.argv[2]).conversations for t in c.turns][:count]
while len(texts) < count:
    texts += texts[: count - len(texts)]
model = embedding_model()
model.embed(texts[:8])  # load the session before timing
batch = settings.ENGRAM_EMBEDDING_BATCH
print("ready", flush=True)
sys.stdin.readline()  # every pool process starts when all have loaded the model
wall_start, started = time.time(), time.perf_counter()
for start in range(0, len(texts), batch):
    model.embed(texts[start : start + batch])
elapsed = time.perf_counter() - started
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"texts": len(texts), "seconds": elapsed, "peak_mb": peak_mb,
                  "wall_start": wall_start, "wall_end": wall_start + elapsed}))
"""


class Command(BaseCommand):
    help = "Embedding throughput per worker, worker peak memory, and recall p95 with the semantic arm."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--texts", type=int, default=4_096, help="Texts each pool process embeds.")
        parser.add_argument(
            "--processes", type=int, default=os.cpu_count() or 1, help="Pool processes (Celery's default: cores)."
        )
        parser.add_argument("--revisions", type=int, default=100_000, help="Corpus size (bench_recall's).")
        parser.add_argument("--agents", type=int, default=20)
        parser.add_argument("--queries", type=int, default=300)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--locomo", default=str(locomo_dev_path()))

    def handle(self, *args: Any, **options: Any) -> None:
        processes = worker_throughput(options["texts"], options["locomo"], options["processes"])
        texts = sum(p["texts"] for p in processes)
        texts_per_s = pool_rate(processes)
        per_process = sorted(p["texts"] / p["seconds"] for p in processes)
        peak_mb = max(p["peak_mb"] for p in processes)
        self.stdout.write(
            f"worker of {len(processes)} pool process(es), {settings.ENGRAM_EMBEDDING_THREADS} thread(s) each, "
            f"batch {settings.ENGRAM_EMBEDDING_BATCH}: {texts} texts = {texts_per_s:.0f} texts/s "
            f"(per process {', '.join(f'{rate:.0f}' for rate in per_process)}); "
            f"peak RSS per process {peak_mb:.0f} MB"
        )
        result: dict[str, Any] = {
            "texts_per_s": round(texts_per_s, 1),
            "texts_per_s_per_process": round(sum(per_process) / len(per_process), 1),
            "processes": len(processes),
            "worker_peak_mb": round(peak_mb, 1),
        }
        if not semantic_enabled():
            self.stdout.write("semantic search is off on this database (no pgvector): recall not measured")
            result["recall_p95_ms"] = None
        else:
            spec = Spec(revisions=options["revisions"], agents=options["agents"], seed=options["seed"])
            agents, _ = ensure_corpus(spec)
            embed_corpus(agents, self.stdout.write)
            settle()  # as bench_recall does: planner statistics that have seen every agent's rows
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


def worker_throughput(texts: int, locomo: str, processes: int = 1) -> list[dict[str, float]]:
    """Embed ``texts`` LoCoMo turns in each of ``processes`` processes running at once, as a worker's
    pool does. Each process loads the model, says it is ready and waits; all start together. One
    dict per process: ``texts``, ``seconds`` (the embedding alone), ``wall_start``/``wall_end`` (epoch
    seconds) and the process's ``peak_mb``."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, str(texts), locomo],
            cwd=settings.BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for run in runs:
        assert run.stdout is not None
        if run.stdout.readline().strip() != "ready":
            raise RuntimeError("an embedding process failed to load the model")
    for run in runs:  # release them all before waiting for any
        assert run.stdin is not None
        run.stdin.write("go\n")
        run.stdin.flush()
    results = []
    for run in runs:
        stdout, _ = run.communicate()
        if run.returncode:
            raise RuntimeError(f"an embedding process failed with exit code {run.returncode}")
        results.append(dict(json.loads(stdout.strip().splitlines()[-1])))
    return results


def pool_rate(processes: list[dict[str, float]]) -> float:
    """Texts per second of processes run at once: all their texts over the span from the first start
    to the last end."""
    span = max(p["wall_end"] for p in processes) - min(p["wall_start"] for p in processes)
    return sum(p["texts"] for p in processes) / span


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
