"""gunicorn serving ``config.wsgi`` on a free loopback port, against the database this process uses.

The benchmark, load and fault commands drive the API over real HTTP through this one launcher; each
chooses its worker model and extra options.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

from bench.harness import http_client

SERVER_START_TIMEOUT_S = 60.0
#: Lines of the server's log added to a failure raised while it serves.
LOG_TAIL_LINES = 40


def server_env(broker_dir: Path) -> dict[str, str]:
    """This process's environment, pointed at the database this process uses and a private broker
    folder (the indexing notifications of the benchmark's writes are not meant for a real worker)."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["CELERY_BROKER_URL"] = "filesystem://"
    env["ENGRAM_CELERY_DIR"] = str(broker_dir)
    # The benchmarks drive one API key faster than the default per-key limit may allow; every request
    # still passes the limit's count, at a rate out of their reach unless one is set.
    env.setdefault("ENGRAM_API_RATE", "1000000/minute")
    name = str(settings.DATABASES["default"]["NAME"])
    if env.get("DATABASE_URL"):
        env["DATABASE_URL"] = urlunsplit(urlsplit(env["DATABASE_URL"])._replace(path=f"/{name}"))
    else:
        env["ENGRAM_DATABASE_NAME"] = name
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` and all its descendants, ended ones included
    (gunicorn's arbiter and workers, or PostgreSQL's postmaster, backends and autovacuum workers).

    A descendant that has ended and been reaped is counted in its parent's ``children_*`` times, so
    the figure only grows: a backend that exits between two readings keeps its CPU in the total,
    instead of taking it out with it (which made a database's per-turn figure swing between runs)."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue  # ended between the listing and the reading: counted in its parent's once reaped
        total += times.user + times.system + times.children_user + times.children_system
    return total


class CpuAccount:
    """The CPU seconds a served API (gunicorn's process tree), the database server (its postmaster's
    tree; None when it is remote, so ``database_pid`` is None) and this process's ended children (a
    load generator run with ``subprocess.run`` is counted there once reaped) spent over a block, and the
    block's wall time."""

    def __init__(self, server_pid: int, database_pid: int | None) -> None:
        self.server_pid = server_pid
        self.database_pid = database_pid
        self.cores = os.cpu_count() or 1
        self.server_s = 0.0
        self.database_s: float | None = None
        self.children_s = 0.0
        self.wall_s = 0.0

    def __enter__(self) -> CpuAccount:
        self._started = (
            process_tree_cpu_seconds(self.server_pid),
            process_tree_cpu_seconds(self.database_pid) if self.database_pid else 0.0,
            _ended_children_cpu_seconds(),
            time.perf_counter(),
        )
        return self

    def __exit__(self, *exc: object) -> None:
        server, database, children, wall = self._started
        self.wall_s = time.perf_counter() - wall
        self.server_s = process_tree_cpu_seconds(self.server_pid) - server
        if self.database_pid:
            self.database_s = process_tree_cpu_seconds(self.database_pid) - database
        self.children_s = _ended_children_cpu_seconds() - children

    @property
    def cores_busy(self) -> float:
        """The share of the machine's cores the three kept busy over the block."""
        spent = self.server_s + (self.database_s or 0.0) + self.children_s
        return spent / max(self.wall_s, 0.001) / self.cores


def _ended_children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def database_server_pid() -> int | None:
    """The postmaster of the PostgreSQL this process uses, when it runs on this machine (the embedded
    server, or a local one); None for a remote server, whose CPU cannot be read from here."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), inet_server_addr() IS NULL OR inet_server_addr() <<= '127.0.0.0/8'")
        backend, local = cursor.fetchone()
    if not local:
        return None
    try:
        parent = psutil.Process(backend).parent()
    except psutil.NoSuchProcess:
        return None
    return parent.pid if parent is not None else None


@contextmanager
def served(folder: Path, **server: Any) -> Iterator[str]:
    """gunicorn on a free 127.0.0.1 port (see :func:`served_process`); yields its base URL."""
    with served_process(folder, **server) as (base_url, _):
        yield base_url


@contextmanager
def served_process(
    folder: Path,
    *,
    workers: int = 2,
    threads: int | None = None,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    code: Path | None = None,
) -> Iterator[tuple[str, int]]:
    """gunicorn on a free 127.0.0.1 port; yields its base URL and its arbiter's pid, and stops it on exit.

    ``workers`` processes, sync ones or, with ``threads``, gthread ones of that many threads (at most
    workers x threads database connections). ``options`` are further gunicorn options and ``env``
    overrides the server's environment. ``code`` serves another checkout of the project (its folder,
    run with this interpreter and its packages) instead of this one. The log is ``folder/gunicorn.log``,
    the broker folder ``folder/celery``; a ``CommandError`` raised while serving gets the log's last
    lines, the server's side of a failed call (a traceback, a worker timeout).
    """
    port = free_port()
    log_path = folder / "gunicorn.log"
    model = ("--threads", str(threads), "--worker-class", "gthread") if threads is not None else ()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"),
                *("--workers", str(workers), *model, "--no-control-socket", "--log-level", "warning"),
                *options,
            ],
            env={**server_env(folder / "celery"), **({"PYTHONPATH": str(code)} if code else {}), **(env or {})},
            cwd=code or settings.BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise CommandError(f"gunicorn exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                # A worker imports Django on its first request, which may take seconds.
                if http_client.call(base_url, "GET", "/api/", timeout=10).status == 200:
                    break
            except http_client.NO_ANSWER:
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"gunicorn did not answer in {SERVER_START_TIMEOUT_S:.0f}s:\n{log_path.read_text()}")
            time.sleep(0.2)
        try:
            yield base_url, process.pid
        except CommandError as error:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
            raise CommandError(f"{error}\n--- gunicorn log (last lines):\n{tail}") from error
    finally:
        # SIGTERM is gunicorn's graceful stop: the arbiter stops its workers and exits.
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
