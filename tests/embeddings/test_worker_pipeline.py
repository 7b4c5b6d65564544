"""The embedding pipeline with real Celery workers: writes through the API become semantically
retrievable once a worker (on the embedded broker, or on Redis) has drained the outbox, and a worker
killed mid-batch loses nothing: after a restart every pending text is embedded exactly once."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db.models import Count
from kombu import pools as kombu_pools

from config.celery import app
from history.models import Message
from memory.embeddings.index import pending_count
from memory.models import IndexOutbox, MemoryRevision, MessageEmbedding, RevisionEmbedding
from tests.api.conftest import runtime_for
from tests.conftest import CeleryWorkerProcess, _worker_env, launch_worker, stop_worker
from tests.factories import AgentFactory

pytestmark = [pytest.mark.worker, pytest.mark.usefixtures("pgvector")]

REDIS_URL = os.environ.get("ENGRAM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextmanager
def publishing_to(worker: CeleryWorkerProcess) -> Iterator[None]:
    """Point this process's Celery app at the worker's broker, so commit notifications reach it."""
    saved = (app.conf.broker_url, dict(app.conf.broker_transport_options or {}))
    url = worker.env["CELERY_BROKER_URL"]
    options: dict[str, Any] = {}
    if url.startswith("filesystem://"):
        folder = Path(worker.env["ENGRAM_CELERY_DIR"])
        options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "store_processed": False,
            "control_folder": str(folder / "control"),
        }

    def reconfigure(broker_url: str, transport_options: dict[str, Any]) -> None:
        app.conf.update(broker_url=broker_url, broker_transport_options=transport_options)
        # Connections and producers are pooled per broker (in kombu's registry too): start afresh.
        kombu_pools.reset()
        app._pool = None  # type: ignore[attr-defined]
        app.amqp._producer_pool = None  # type: ignore[attr-defined]

    reconfigure(url, options)
    try:
        yield
    finally:
        reconfigure(*saved)


def semantically_retrievable_through_the_api(worker: CeleryWorkerProcess, settings: Any) -> None:
    settings.ENGRAM_NOTIFY_INDEXER = True
    runtime = runtime_for(AgentFactory.create())
    runtime.say("dm-alice", "U200", "hello")
    with publishing_to(worker):
        turn = runtime.turn("dm-alice", "U200", "Please write to me in a short, prose-first way.")
        made = runtime.round(
            turn["turn_id"],
            {
                "verb": "remember",
                "body": "Prefers concise prose-first writing.",
                "belief_type": "preference",
                "subject": "speaker",
            },
        )
        memory_id = made.json()["results"][0]["result"]["id"]
        revision_id = int(memory_id.split(":")[1], 16)
        wait_for(lambda: RevisionEmbedding.objects.filter(revision_id=revision_id).exists(), 60, "the embedding")

    later = runtime.turn("dm-alice", "U200", "hi again")
    found = runtime.round(later["turn_id"], {"verb": "recall", "query": "keep it brief"}).json()
    items = found["results"][0]["result"]["items"]
    assert [item["id"] for item in items] == [memory_id]
    assert items[0]["components"]["match"] > 0 and found["results"][0]["result"]["degradation"] == ""


def test_api_writes_become_semantically_retrievable_with_a_worker_on_the_embedded_broker(
    transactional_db: None, celery_worker_process: CeleryWorkerProcess, settings: Any
) -> None:
    semantically_retrievable_through_the_api(celery_worker_process, settings)


def redis_available() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def redis_worker(transactional_db: None, tmp_path: Path) -> Iterator[CeleryWorkerProcess]:
    if not redis_available():
        pytest.skip("no Redis on 127.0.0.1:6379")
    env = _worker_env(settings.DATABASES["default"]["NAME"], tmp_path / "unused")
    env["CELERY_BROKER_URL"] = REDIS_URL
    worker = launch_worker(env, tmp_path, f"engram-redis-{os.getpid()}@localhost")
    try:
        yield worker
    finally:
        stop_worker(worker)


def test_api_writes_become_semantically_retrievable_with_a_worker_on_redis(
    redis_worker: CeleryWorkerProcess, settings: Any
) -> None:
    semantically_retrievable_through_the_api(redis_worker, settings)


def test_a_worker_killed_mid_batch_loses_nothing_and_embeds_everything_exactly_once(
    transactional_db: None, tmp_path: Path
) -> None:
    runtime = runtime_for(AgentFactory.create())
    for n in range(200):
        runtime.say("general", "U100", f"Status update {n}: the migration of shard {n} is complete.")
    total = pending_count()
    assert total >= 200

    env = _worker_env(settings.DATABASES["default"]["NAME"], tmp_path / "broker")
    env["ENGRAM_EMBEDDING_BATCH"] = "8"  # small batches: the kill lands between commits
    first = launch_worker(env, tmp_path, f"engram-kill-a-{os.getpid()}@localhost")
    try:
        with publishing_to(first):
            app.send_task("memory.tasks.embed_pending")
        wait_for(lambda: MessageEmbedding.objects.exists(), 60, "the first batches")
        os.killpg(first.process.pid, signal.SIGKILL)  # the worker and its pool child, mid-run
        first.process.wait()
    finally:
        stop_worker(first)
    left = pending_count()
    assert 0 < left < total, "the kill should land mid-way through the queue"

    second = launch_worker(env, tmp_path, f"engram-kill-b-{os.getpid()}@localhost")
    try:
        with publishing_to(second):
            app.send_task("memory.tasks.embed_pending")
        wait_for(lambda: pending_count() == 0, 120, "the queue to drain after the restart")
    finally:
        stop_worker(second)

    messages = Message.objects.filter(agent=runtime.agent)
    per_message = MessageEmbedding.objects.filter(message__in=messages).values("message_id").annotate(n=Count("id"))
    assert messages.count() == per_message.count()  # every message has a vector...
    assert {row["n"] for row in per_message} == {1}  # ...exactly one
    revisions = MemoryRevision.objects.filter(agent=runtime.agent)
    assert RevisionEmbedding.objects.filter(revision__in=revisions).count() == revisions.count()
    assert not IndexOutbox.objects.filter(processed_at__isnull=True).exists()
