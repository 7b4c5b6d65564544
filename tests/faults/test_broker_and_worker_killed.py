"""The Celery worker AND its broker killed mid-batch: once both are back, every pending embedding
completes exactly once, and writes made while the broker is down still commit promptly.

The broker is a private ``redis-server`` on a free 127.0.0.1 port, without persistence, so the kill
(SIGKILL) loses every queued message: what finishes the work afterwards is the outbox drain that the
periodic task (beat) starts, sent here by hand instead of waiting for its 30 s schedule.
``tests/embeddings/test_worker_pipeline.py`` covers the worker alone killed on the embedded broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.db.models import Count

from config.celery import app
from history.models import Message
from memory.embeddings.index import pending_count
from memory.models import IndexOutbox, MessageEmbedding
from tests.api.conftest import runtime_for
from tests.conftest import _worker_env, launch_worker, stop_worker
from tests.embeddings.test_worker_pipeline import publishing_to, wait_for
from tests.factories import AgentFactory

pytestmark = [pytest.mark.worker, pytest.mark.usefixtures("pgvector")]

REDIS_SERVER = shutil.which("redis-server")
REDIS_START_TIMEOUT_S = 10.0
#: A write whose commit notification cannot reach the broker still answers within this.
WRITE_WITH_BROKER_DOWN_S = 10.0


@pytest.fixture
def pgvector(db: None) -> None:
    """Skips the test on a server without pgvector, where Engram runs lexical-only by design."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone() is None:
            pytest.skip("the server has no pgvector: Engram runs lexical-only there")


def database_sessions() -> set[int]:
    """The server processes of every session connected to the test database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return {pid for (pid,) in cursor.fetchall()}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Redis:
    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [
                *(REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(self.folder)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    pytest.fail("the private redis-server did not start")
                time.sleep(0.1)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[Redis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    server = Redis(port=free_port(), folder=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_killing_the_worker_and_the_broker_mid_batch_loses_nothing_and_embeds_each_text_once(
    transactional_db: None, redis: Redis, tmp_path: Path, settings: Any
) -> None:
    runtime = runtime_for(AgentFactory.create())
    for n in range(200):
        runtime.say("general", "U100", f"Status update {n}: the cut-over of region {n} is done.")
    total = pending_count()
    assert total >= 200

    sessions_before = database_sessions()
    env = _worker_env(django_settings.DATABASES["default"]["NAME"], tmp_path / "unused")
    env["CELERY_BROKER_URL"] = redis.url
    env["ENGRAM_EMBEDDING_BATCH"] = "8"  # small batches: the kill lands between commits
    first = launch_worker(env, tmp_path, f"engram-fault-a-{os.getpid()}@localhost")
    try:
        with publishing_to(first):
            app.send_task("memory.tasks.embed_pending")
            app.send_task("memory.tasks.embed_pending")  # a second message, still queued at the kill
        wait_for(lambda: MessageEmbedding.objects.exists(), 60, "the first batches")
        redis.kill()  # the broker and everything queued in it...
        os.killpg(first.process.pid, signal.SIGKILL)  # ...and the worker with its pool child, mid-run
        first.process.wait()
    finally:
        stop_worker(first)
    # A commit the killed child had already sent still completes: count once its sessions are gone.
    wait_for(lambda: database_sessions() <= sessions_before, 30, "the killed worker's database sessions to end")
    left = pending_count()
    assert 0 < left < total, "the kills should land mid-way through the queue"

    # With the broker down, a write still commits and answers promptly; its notification is lost.
    settings.ENGRAM_NOTIFY_INDEXER = True
    with publishing_to(first):
        started = time.monotonic()
        runtime.say("general", "U100", "Written while the broker is down.")
        assert time.monotonic() - started < WRITE_WITH_BROKER_DOWN_S
    settings.ENGRAM_NOTIFY_INDEXER = False
    assert Message.objects.filter(body="Written while the broker is down.").exists()
    assert pending_count() == left + 1

    redis.start()  # empty: nothing that was queued survived
    second = launch_worker(env, tmp_path, f"engram-fault-b-{os.getpid()}@localhost")
    try:
        with publishing_to(second):
            app.send_task("memory.tasks.embed_pending")  # what beat's periodic drain sends
        wait_for(lambda: pending_count() == 0, 120, "the outbox to drain after the restart")
    finally:
        stop_worker(second)

    messages = Message.objects.filter(agent=runtime.agent)
    per_message = MessageEmbedding.objects.filter(message__in=messages).values("message_id").annotate(n=Count("id"))
    assert messages.count() == per_message.count() == total + 1  # every message has a vector...
    assert {row["n"] for row in per_message} == {1}  # ...exactly one
    assert not IndexOutbox.objects.filter(processed_at__isnull=True).exists()
