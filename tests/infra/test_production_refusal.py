"""The production profile refuses at import: with ``ENGRAM_ENV=production`` and the development (or an
empty) secret, DEBUG on, or an audit key that is not a secret of its own, the settings module raises
``ImproperlyConfigured`` naming each problem and the variable to set. So gunicorn's ``config.wsgi``, a
Celery worker of ``config.celery`` and every ``manage.py`` command exit non-zero with that message
instead of serving; with real production variables each of them loads, and loading connects to no
database. Every case runs in a subprocess with its own environment."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings

from config.checks import production_profile
from config.production import DEVELOPMENT_SECRET_KEY, derived_audit_key, production_problems
from tests.infra.test_production_profile import env, secret

#: Loads the application as a gunicorn worker does.
LOAD_WSGI = "import config.wsgi; print('loaded', type(config.wsgi.application).__name__)"
#: A database no one listens on: loading must not need one.
NOWHERE = "postgresql://engram@127.0.0.1:9/engram"


def run(*command: str, **values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command),
        cwd=settings.BASE_DIR,
        env=env(**values),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def production(**values: str) -> dict[str, str]:
    """What a production deployment sets: its own secret and audit key, a host and a database."""
    return {
        "ENGRAM_ENV": "production",
        "ENGRAM_SECRET_KEY": secret(),
        "ENGRAM_AUDIT_KEY": secret(),
        "ENGRAM_ALLOWED_HOSTS": "engram.example",
        "DATABASE_URL": NOWHERE,
        **values,
    }


def refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "ImproperlyConfigured: ENGRAM_ENV=production refuses to start" in result.stderr, result.stderr
    return result.stderr


def test_the_wsgi_application_refuses_to_load_with_the_development_secret() -> None:
    """gunicorn config.wsgi would serve nothing: the import fails, naming the secret and its variable."""
    stderr = refused(run(sys.executable, "-c", LOAD_WSGI, ENGRAM_ENV="production"))
    assert "engram.E001" in stderr and "development SECRET_KEY" in stderr and "Set ENGRAM_SECRET_KEY" in stderr
    # Unset, the audit key is derived from the (public) development key: named too.
    assert "engram.E003" in stderr and "Set ENGRAM_AUDIT_KEY" in stderr
    assert "engram.E002" not in stderr


def test_the_wsgi_application_loads_with_production_variables_and_connects_to_nothing() -> None:
    result = run(sys.executable, "-c", LOAD_WSGI, **production())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "loaded WSGIHandler"


def test_every_problem_is_named_with_the_variable_to_set() -> None:
    key = secret()
    stderr = refused(
        run(sys.executable, "-c", LOAD_WSGI, **production(ENGRAM_SECRET_KEY="", ENGRAM_DEBUG="1", ENGRAM_AUDIT_KEY=key))
    )
    assert "engram.E001" in stderr and "Set ENGRAM_SECRET_KEY" in stderr
    assert "engram.E002" in stderr and "Unset ENGRAM_DEBUG" in stderr
    # An audit key of its own beside an empty secret is not a problem.
    assert "(2 problem(s)" in stderr and "engram.E003" not in stderr
    equal = refused(run(sys.executable, "-c", LOAD_WSGI, **production(ENGRAM_SECRET_KEY=key, ENGRAM_AUDIT_KEY=key)))
    assert "engram.E003" in equal and "engram.E001" not in equal and "engram.E002" not in equal


@pytest.mark.parametrize(
    ("audit_key", "allowed"),
    [
        (None, False),  # unset: derived from the secret key, so one leaked value exposes both
        ("derived from the secret", False),  # the same value, set by hand
        ("derived from the development key", False),  # public
        ("the secret itself", False),
        ("", True),  # an explicit choice of no digests
        ("a random value of its own", True),
    ],
)
def test_a_production_audit_key_must_be_a_secret_of_its_own(audit_key: str | None, allowed: bool) -> None:
    values = production()
    key = values["ENGRAM_SECRET_KEY"]
    if audit_key is None:
        del values["ENGRAM_AUDIT_KEY"]
    elif audit_key == "derived from the secret":
        values["ENGRAM_AUDIT_KEY"] = derived_audit_key(key)
    elif audit_key == "derived from the development key":
        values["ENGRAM_AUDIT_KEY"] = derived_audit_key(DEVELOPMENT_SECRET_KEY)
    elif audit_key == "the secret itself":
        values["ENGRAM_AUDIT_KEY"] = key
    elif audit_key == "":
        values["ENGRAM_AUDIT_KEY"] = ""
    result = run(sys.executable, "-c", "import config.settings", **values)
    if allowed:
        assert result.returncode == 0, result.stderr
    else:
        stderr = refused(result)
        assert "engram.E003" in stderr and "Set ENGRAM_AUDIT_KEY" in stderr
        assert "engram.E001" not in stderr


def test_a_celery_worker_refuses_to_start_and_loads_with_production_variables() -> None:
    """The worker reads its configuration from the settings before it connects to a broker."""
    stderr = refused(
        run(sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo", ENGRAM_ENV="production")
    )
    assert "engram.E001" in stderr
    report = run(sys.executable, "-m", "celery", "-A", "config", "report", **production())
    assert report.returncode == 0, report.stderr
    assert "settings -> transport:filesystem" in report.stdout  # the configuration it read from the settings


def test_every_manage_py_command_refuses_not_only_those_running_the_system_checks() -> None:
    for command in (["api_key", "list"], ["migrate"], ["shell", "--no-imports", "-c", "print('served')"]):
        result = run(sys.executable, "manage.py", *command, ENGRAM_ENV="production")
        stderr = refused(result)
        assert "engram.E001" in stderr, command
        assert "served" not in result.stdout
    loaded = run(sys.executable, "manage.py", "shell", "--no-imports", "-c", "print('served')", **production())
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "served"


def test_the_system_check_reports_the_same_rule_for_settings_changed_after_loading(settings: Any) -> None:
    """One rule (config.production): settings changed after loading meet it again in `manage.py check`."""
    settings.PRODUCTION = True
    settings.DEBUG = True
    settings.ENGRAM_AUDIT_KEY = settings.SECRET_KEY
    reported = {(error.id, error.msg, error.hint) for error in production_profile()}
    expected = production_problems(secret_key=settings.SECRET_KEY, debug=True, audit_key=settings.SECRET_KEY)
    assert reported == {(p.id, p.message, p.hint) for p in expected}
    assert {p.id for p in expected} >= {"engram.E002", "engram.E003"}
