"""Shared fixtures. Every test runs on real PostgreSQL (the embedded server unless DATABASE_URL is set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

# One Chromium for the whole session: its fixtures are registered here once (importing them into
# several conftests would register them twice, and Playwright allows one sync session per thread).
pytest_plugins = ["tests.browser", "tests.replica"]

WORKER_START_TIMEOUT = 60.0
CELERY = (sys.executable, "-m", "celery", "-A", "config")


@dataclass
class CeleryWorkerProcess:
    """A running ``celery -A config worker`` and the environment that reaches it.

    Run other ``celery`` commands (or ``manage.py`` calls that enqueue) with ``env`` to talk to this
    worker: it has a private filesystem broker and no other worker listens there.
    """

    process: subprocess.Popen[bytes]
    hostname: str
    env: dict[str, str]
    log_path: Path

    def ping(self, timeout: float = 2.0) -> bool:
        """True when this worker answers ``celery inspect ping``."""
        result = subprocess.run(
            [*CELERY, "inspect", "ping", "--json", "--timeout", str(timeout), "--destination", self.hostname],
            env=self.env,
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        # `celery inspect` prints {"<hostname>": {"ok": "pong"}} on its last line when the worker replied.
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            return False
        try:
            replies = json.loads(lines[-1])
        except json.JSONDecodeError:
            return False
        return replies.get(self.hostname) == {"ok": "pong"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _worker_env(database_name: str, broker_dir: Path) -> dict[str, str]:
    """The environment of this test process, pointed at the test database and a private broker."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["CELERY_BROKER_URL"] = "filesystem://"
    env["ENGRAM_CELERY_DIR"] = str(broker_dir)
    env["ENGRAM_TASKS_EAGER"] = "0"
    if env.get("DATABASE_URL"):
        # An external server: keep the URL, swap in the test database's name.
        parts = urlsplit(env["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{database_name}"))
    else:
        env["ENGRAM_DATABASE_NAME"] = database_name
    return env


def launch_worker(env: dict[str, str], folder: Path, hostname: str, *, concurrency: int = 1) -> CeleryWorkerProcess:
    """Start a real prefork ``celery -A config worker`` with ``env`` and wait until it answers ping.

    It leads its own process group, so a test can kill it and its pool children at once.
    """
    log_path = folder / f"{hostname.split('@')[0]}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *CELERY,
                "worker",
                *("--pool", "prefork", "--concurrency", str(concurrency), "--hostname", hostname),
                "--loglevel",
                "INFO",
                # No other worker shares this broker: skip the start-up handshakes that wait for peers.
                *("--without-mingle", "--without-gossip", "--without-heartbeat"),
            ],
            env=env,
            cwd=settings.BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = CeleryWorkerProcess(process=process, hostname=hostname, env=env, log_path=log_path)
    deadline = time.monotonic() + WORKER_START_TIMEOUT
    while not worker.ping():
        if worker.process.poll() is not None:
            pytest.fail(f"the Celery worker exited with {worker.process.returncode}:\n{worker.log()}")
        if time.monotonic() > deadline:
            stop_worker(worker)
            pytest.fail(f"the Celery worker did not answer ping in {WORKER_START_TIMEOUT:.0f}s:\n{worker.log()}")
        time.sleep(0.5)
    return worker


def stop_worker(worker: CeleryWorkerProcess) -> None:
    """Warm shutdown (SIGTERM: the running task finishes), then a kill if it takes too long."""
    if worker.process.poll() is not None:
        return
    worker.process.send_signal(signal.SIGTERM)
    try:
        worker.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait()


@pytest.fixture(scope="session")
def celery_worker_process(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorkerProcess]:
    """A real prefork Celery worker (concurrency 1) on pytest-django's test database.

    The worker is a separate process with its own connections, so it sees only committed rows: tests
    that hand it data must use ``transactional_db`` (the ``db`` fixture's transaction is invisible to
    it). It depends on ``django_db_setup`` for the test database's name (Django renames
    ``DATABASES['default']['NAME']`` once the test database exists) and so that it is torn down, and
    its connections closed, before that database is dropped.
    """
    folder = tmp_path_factory.mktemp("celery-worker")
    env = _worker_env(settings.DATABASES["default"]["NAME"], folder / "broker")
    worker = launch_worker(env, folder, f"engram-test-{os.getpid()}@localhost")
    try:
        yield worker
    finally:
        stop_worker(worker)


@pytest.fixture(autouse=True)
def _no_indexer_notifications(settings: Any) -> None:
    """Writes in tests do not enqueue Celery tasks on the developer's broker; tests that need the
    indexer drain the outbox directly or run a real worker and turn notifications back on."""
    settings.ENGRAM_NOTIFY_INDEXER = False


@pytest.fixture(autouse=True)
def _api_rate_out_of_reach(settings: Any) -> None:
    """Every API request still passes the per-key rate limit's count (accounts/throttling.py), at a
    rate no test reaches; the rate-limit tests set their own."""
    settings.ENGRAM_API_RATE = "1000000/minute"


@pytest.fixture(scope="session", autouse=True)
def read_workers_closed(django_db_setup: None) -> Iterator[None]:
    """The read workers (``config.read_workers``) keep connections to the test database open between
    tests; they are closed before the database is dropped."""
    yield
    from config.read_workers import read_workers

    read_workers.close()
