"""The run command's demo step (`manage.py provision_demo`, which scripts/run calls with --if-allowed):
the public demo logins (admin / engram-demo, the demo end users) and the demo workspace go into the
embedded database only, outside production, unless ENGRAM_LOAD_DEMO=1 opts in; never silently into an
external DATABASE_URL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import Tenant

EXTERNAL_SERVER = "postgresql://postgres@127.0.0.1:5432"


def provision(*args: str) -> str:
    out = StringIO()
    call_command("provision_demo", *args, stdout=out)
    return out.getvalue()


def nothing_provisioned() -> bool:
    return not User.objects.exists() and not Tenant.objects.exists()


@pytest.fixture
def where(settings: Any) -> Any:
    settings.ENGRAM_DATABASE_IS_EMBEDDED = True
    settings.ENGRAM_LOAD_DEMO = None
    settings.PRODUCTION = False
    return settings


@pytest.mark.django_db
def test_the_embedded_database_gets_the_demo_superuser_and_workspace(where: Any):
    out = provision("--if-allowed")
    assert "demo loaded" in out
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("engram-demo")
    assert Tenant.objects.filter(slug="acme").exists()


@pytest.mark.django_db
def test_an_external_database_gets_nothing_without_the_opt_in(where: Any):
    where.ENGRAM_DATABASE_IS_EMBEDDED = False
    with pytest.raises(CommandError, match="external DATABASE_URL"):
        provision()
    assert "demo not loaded" in provision("--if-allowed")
    assert nothing_provisioned()


@pytest.mark.django_db
def test_production_gets_nothing_without_the_opt_in(where: Any):
    where.PRODUCTION = True
    assert "ENGRAM_ENV=production" in provision("--if-allowed")
    assert nothing_provisioned()


@pytest.mark.django_db
def test_the_opt_out_wins_even_on_the_embedded_database(where: Any):
    where.ENGRAM_LOAD_DEMO = False
    assert "ENGRAM_LOAD_DEMO=0" in provision("--if-allowed")
    assert nothing_provisioned()


@pytest.mark.django_db
def test_the_opt_in_loads_the_demo_into_an_external_database(where: Any):
    where.ENGRAM_DATABASE_IS_EMBEDDED = False
    where.ENGRAM_LOAD_DEMO = True
    assert "demo loaded" in provision()
    assert User.objects.get(username="admin").check_password("engram-demo")


def _external_server_answers() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture
def external_database() -> Iterator[str]:
    """A fresh database of this test's own on the external PostgreSQL at 127.0.0.1:5432, migrated."""
    if not _external_server_answers():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = f"engram_demo_step_{os.getpid()}"
    with psycopg.connect(f"{EXTERNAL_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{EXTERNAL_SERVER}/{name}"
    try:
        manage("migrate", "--noinput", url=url)
        yield url
    finally:
        with psycopg.connect(f"{EXTERNAL_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(*args: str, url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"ENGRAM_LOAD_DEMO", "ENGRAM_ENV", "ENGRAM_DATABASE_NAME"}}
    env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="config.settings", **extra)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=args[0] == "migrate",
    )


def demo_rows(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as connection:
        users = connection.execute("SELECT count(*) FROM auth_user").fetchone()
        tenants = connection.execute("SELECT count(*) FROM accounts_tenant").fetchone()
    assert users is not None and tenants is not None
    return users[0], tenants[0]


def test_the_run_commands_demo_step_on_an_external_database_creates_no_admin(external_database: str):
    """Exactly what scripts/run runs, pointed at a real external server: no admin / engram-demo, no demo
    users, no demo tenant; the same step with ENGRAM_LOAD_DEMO=1 does load them (so the check can fail)."""
    step = manage("provision_demo", "--if-allowed", url=external_database)
    assert step.returncode == 0, step.stderr
    assert "demo not loaded: the database is an external DATABASE_URL" in step.stdout
    assert demo_rows(external_database) == (0, 0)
    refused = manage("provision_demo", url=external_database)
    assert refused.returncode == 1 and "external DATABASE_URL" in refused.stderr
    assert demo_rows(external_database) == (0, 0)

    opted_in = manage("provision_demo", "--if-allowed", url=external_database, ENGRAM_LOAD_DEMO="1")
    assert opted_in.returncode == 0 and "demo loaded" in opted_in.stdout, opted_in.stderr
    users, tenants = demo_rows(external_database)
    assert users >= 1 and tenants == 1
