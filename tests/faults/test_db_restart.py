"""The database restarting under HTTP load: requests fail with a clean 503 ``database_unavailable``
body, none hangs, service recovers once the server is back, and nothing the server acknowledged is
lost or half-written.

The scenario (``manage.py fault_db_restart``, which states the checks) stops its database, so it runs
in a subprocess against a private embedded PostgreSQL in a fresh folder, never the suite's server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.worker  # starts its own PostgreSQL and gunicorn: slow

SCENARIO_TIMEOUT_S = 280


def test_a_database_restart_mid_load_fails_cleanly_recovers_and_loses_nothing() -> None:
    # A short folder: the server's unix socket path must fit the 107-byte limit.
    var_dir = Path(tempfile.mkdtemp(prefix="engram-fdb-", dir="/tmp"))
    # The runtime folder (pgserver's lock) is derived from the private folder too.
    private = {"DATABASE_URL", "ENGRAM_DATABASE_NAME", "XDG_RUNTIME_DIR", "ENGRAM_CELERY_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in private}
    env.update(ENGRAM_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="config.settings")
    try:
        completed = subprocess.run(
            [sys.executable, "manage.py", "fault_db_restart", "--clients", "4", "--before", "3", "--after", "6"],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCENARIO_TIMEOUT_S,
            check=False,
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "config.embedded_postgres", "stop"],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(var_dir, ignore_errors=True)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    assert summary["database_unavailable_503"] > 0 and summary["other_failures"] == 0
    assert summary["requests_after_recovery"] > 0 and summary["acknowledged_memories"] > 0
    assert summary["max_request_s"] < 15
