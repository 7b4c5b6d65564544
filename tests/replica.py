"""A streaming read replica of the test server, for tests whose reads are routed to it (config.replica).

``streaming_replica`` (session): with ``ENGRAM_TEST_REPLICA_URL`` set, that server (a streaming replica
of the server ``DATABASE_URL`` names, e.g. ``scripts/cluster``'s); otherwise, when the tests run on the
embedded server, a physical copy of it made with pgserver's ``pg_basebackup`` under ``var/``, started
as a hot standby that streams from it, and removed afterwards. Skipped, saying why, when neither is
possible. ``routed_replica`` (per test, committed rows: ``transactional_db``) adds the ``replica``
alias for the test database and answers this process's :data:`config.replica.stats`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dj_database_url
import pytest
from django.conf import settings
from django.db import connections

from config import replica
from config.database.base import DatabaseWrapper


def _pg_bin() -> Path | None:
    try:
        import pgserver
    except ImportError:
        return None
    path = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return path if (path / "pg_basebackup").exists() else None


def _as_server_user(command: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; the embedded server runs as the pgserver user then.
    return ["runuser", "-u", "pgserver", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="session")
def streaming_replica(django_db_setup: Any, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """Connection settings (HOST, PORT, ...) of a streaming replica of the test server."""
    url = os.environ.get("ENGRAM_TEST_REPLICA_URL")
    if url:
        yield dict(dj_database_url.parse(url))
        return
    if os.environ.get("DATABASE_URL"):
        pytest.skip("DATABASE_URL names an external server: set ENGRAM_TEST_REPLICA_URL to a streaming replica of it")
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("pg_basebackup is not available (pgserver's binaries)")
    primary = connections["default"].settings_dict
    data = Path(settings.VAR_DIR) / f"test-replica-{os.getpid()}"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(mode=0o700, parents=True)
    if os.geteuid() == 0:
        shutil.chown(data, "pgserver", "pgserver")
    subprocess.run(
        _as_server_user(
            [
                str(bin_dir / "pg_basebackup"),
                "-h",
                primary["HOST"],
                "-U",
                "postgres",
                "-D",
                str(data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ]
        ),
        check=True,
        capture_output=True,
    )
    # The embedded server's socket folder is its data folder: the copy holds its socket's lock file.
    for stale in data.glob(".s.PGSQL.*"):
        stale.unlink()
    # Its own socket folder, no TCP: the copy's configuration is the primary's otherwise.
    with (data / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"listen_addresses = ''\nunix_socket_directories = '{data}'\nhot_standby = on\n")
    ctl = str(bin_dir / "pg_ctl")
    started = subprocess.run(
        _as_server_user([ctl, "-D", str(data), "-l", str(data / "startup.log"), "-w", "-t", "60", "start"]), check=False
    )
    if started.returncode != 0:
        raise RuntimeError(f"the streaming replica did not start:\n{(data / 'startup.log').read_text()}")
    try:
        yield {"HOST": str(data), "PORT": ""}
    finally:
        subprocess.run(_as_server_user([ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]), check=False)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def routed_replica(transactional_db: Any, streaming_replica: dict[str, Any]) -> Iterator[replica.ReplicaStats]:
    """The ``replica`` alias, reading the test database on the streaming replica, for this test.

    The lag bound is raised far past any replay delay, so every routed read of the test is served by
    the replica (the test can assert it was) rather than by a fallback to the primary."""
    alias = replica.REPLICA_ALIAS
    primary = connections["default"].settings_dict
    entry = {
        **primary,
        "HOST": streaming_replica.get("HOST", primary["HOST"]),
        "PORT": streaming_replica.get("PORT", ""),
        "TEST": {},
    }
    # A connection made here, not declared in DATABASES: pytest-django's test case allows only the
    # aliases it was told of when it was set up, and allows connections created during the test.
    wrapper = DatabaseWrapper(entry, alias)  # the primary's settings are complete already
    connections[alias] = wrapper
    saved = settings.ENGRAM_READ_REPLICA, settings.ENGRAM_REPLICA_MAX_LAG_MS
    settings.ENGRAM_READ_REPLICA, settings.ENGRAM_REPLICA_MAX_LAG_MS = True, 60_000
    replica.reset_stats()
    try:
        yield replica.stats
    finally:
        settings.ENGRAM_READ_REPLICA, settings.ENGRAM_REPLICA_MAX_LAG_MS = saved
        wrapper.close()
        del connections[alias]
