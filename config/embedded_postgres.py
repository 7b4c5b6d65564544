"""The embedded PostgreSQL 16 + pgvector server used when no DATABASE_URL is given.

The PyPI package ``pgserver`` ships the server binaries. The server keeps its data under the
project's ``var/`` folder and listens on a unix socket inside that folder only. It is started with
``cleanup_mode=None`` so that one server outlives the process that started it and serves the web
process, the Celery worker and later ``manage.py`` calls alike; ``stop()`` ends it explicitly.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

DATABASE_NAME = "engram"


def _quiet_runtime_dir(var_dir: Path) -> None:
    # pgserver resolves a runtime folder through platformdirs, which warns unless it is set and private.
    if "XDG_RUNTIME_DIR" not in os.environ:
        runtime = var_dir / "run"
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)


def ensure_running(data_dir: Path, database: str = DATABASE_NAME) -> str:
    """Start the embedded server if needed and create ``database``; return the socket folder.

    The socket folder is usually ``data_dir`` itself, but pgserver picks a shorter one when that path
    would exceed the unix-socket length limit, so it is read back from the running server.
    """
    _quiet_runtime_dir(data_dir.parent)
    import pgserver  # imported lazily: only the embedded configuration needs it

    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir, cleanup_mode=None)
    literal = database.replace("'", "''")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{literal}';")
    if "(1 row)" not in exists:
        identifier = database.replace('"', '""')
        server.psql(f'CREATE DATABASE "{identifier}";')
    uri = urlsplit(server.get_uri())
    return parse_qs(uri.query)["host"][0]


def postmaster_pid(data_dir: Path) -> int | None:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return None
    first_line = pid_file.read_text().splitlines()[0].strip()
    return int(first_line) if first_line.isdigit() else None


def is_running(data_dir: Path) -> bool:
    """True if ``postmaster.pid`` names a live process (a crash can leave a stale file behind)."""
    pid = postmaster_pid(data_dir)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but owned by the pgserver user
        return True
    return True


def stop(data_dir: Path, timeout: float = 30.0) -> bool:
    """Ask the server for a fast shutdown (SIGINT) and wait for it to exit. True if it was running."""
    pid = postmaster_pid(data_dir)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    raise TimeoutError(f"embedded PostgreSQL (pid {pid}) did not stop within {timeout:.0f}s")


def main(argv: list[str] | None = None) -> int:
    """``python -m config.embedded_postgres start|stop|status`` for the server of the configured var dir.

    The folder is read from the settings (ENGRAM_VAR_DIR) with autostart turned off, so ``status`` and
    ``stop`` never start a server. ``status`` exits 0 when running and 3 when not (as LSB scripts do).
    """
    parser = argparse.ArgumentParser(prog="python -m config.embedded_postgres", description=main.__doc__)
    parser.add_argument("action", choices=["start", "stop", "status"])
    action = parser.parse_args(argv).action

    os.environ["ENGRAM_EMBEDDED_POSTGRES_AUTOSTART"] = "0"
    # Through Django's lazy settings, as app code reads them: the settings module itself imports this
    # one to start the server, so importing it back would make the two a cycle.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings

    data_dir: Path = settings.EMBEDDED_POSTGRES_DIR
    if action == "start":
        ensure_running(data_dir)
        print(f"embedded PostgreSQL running (pid {postmaster_pid(data_dir)}) in {data_dir}")
    elif action == "stop":
        print(f"embedded PostgreSQL in {data_dir}: {'stopped' if stop(data_dir) else 'was not running'}")
    elif is_running(data_dir):
        print(f"embedded PostgreSQL running (pid {postmaster_pid(data_dir)}) in {data_dir}")
    else:
        print(f"embedded PostgreSQL not running in {data_dir}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
