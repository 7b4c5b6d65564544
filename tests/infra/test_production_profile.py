"""The production profile (``ENGRAM_ENV=production``): `manage.py check` refuses to start with the public
development SECRET_KEY, with DEBUG on or with an audit key that is not a secret of its own; with real secrets
`check --deploy --fail-level WARNING` passes; the HTTPS settings default on and each one is overridable.
Every case runs the real command in a subprocess with its own environment."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from typing import Any

from django.conf import settings

#: Variables of the developer's or CI's environment that would change what these processes see.
CLEARED = (
    "ENGRAM_ENV",
    "ENGRAM_SECRET_KEY",
    "ENGRAM_AUDIT_KEY",
    "ENGRAM_DEBUG",
    "ENGRAM_SESSION_COOKIE_SECURE",
    "ENGRAM_CSRF_COOKIE_SECURE",
    "ENGRAM_SSL_REDIRECT",
    "ENGRAM_HSTS_SECONDS",
    "ENGRAM_HSTS_INCLUDE_SUBDOMAINS",
    "ENGRAM_HSTS_PRELOAD",
    "ENGRAM_PROXY_SSL_HEADER",
    "ENGRAM_LOGIN_FAILURE_LIMIT",
    "ENGRAM_LOGIN_COOLOFF_MINUTES",
    "ENGRAM_LOGIN_LOCKOUT_BY",
    "ENGRAM_API_RATE",
    # The browser tests set it for this process; a deployment never would, and Django's deploy check says so.
    "DJANGO_ALLOW_ASYNC_UNSAFE",
)


def env(**values: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    # `check` needs no database: do not start the embedded server for it.
    base["ENGRAM_EMBEDDED_POSTGRES_AUTOSTART"] = "0"
    base["DJANGO_SETTINGS_MODULE"] = "config.settings"
    return {**base, **values}


def check(*args: str, **values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=settings.BASE_DIR,
        env=env(**values),
        capture_output=True,
        text=True,
        check=False,
    )


def secret() -> str:
    return secrets.token_urlsafe(50)  # 67 characters


SETTINGS = (
    "SESSION_COOKIE_SECURE CSRF_COOKIE_SECURE SECURE_SSL_REDIRECT SECURE_HSTS_SECONDS SECURE_HSTS_INCLUDE_SUBDOMAINS"
    " SECURE_HSTS_PRELOAD SECURE_PROXY_SSL_HEADER AXES_FAILURE_LIMIT AXES_COOLOFF_TIME AXES_LOCKOUT_PARAMETERS"
    " ENGRAM_API_RATE"
).split()
DUMP = f"""
import json
from config import settings as s
print(json.dumps({{name: getattr(s, name) for name in {SETTINGS!r}}}, default=str))
"""


def settings_with(**values: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", DUMP],
        cwd=settings.BASE_DIR,
        env=env(**values),
        capture_output=True,
        text=True,
        check=True,
    )
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def test_production_with_real_secrets_passes_the_deploy_check_at_warning_level():
    result = check(
        "--deploy",
        "--fail-level",
        "WARNING",
        ENGRAM_ENV="production",
        ENGRAM_SECRET_KEY=secret(),
        ENGRAM_AUDIT_KEY=secret(),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_production_without_a_secret_refuses_with_a_clear_message():
    """The development key is public (and so is the audit key derived from it): the refusal names both."""
    result = check(ENGRAM_ENV="production")
    assert result.returncode != 0
    assert "engram.E001" in result.stderr and "development SECRET_KEY" in result.stderr
    assert "engram.E003" in result.stderr
    assert "engram.E002" not in result.stderr


def test_production_with_only_a_real_secret_refuses_the_derived_audit_key():
    """Unset, the audit key is derived from the secret: one leaked value would expose both, so production
    wants a key of its own (tests/infra/test_production_refusal.py has the whole rule)."""
    result = check("--deploy", ENGRAM_ENV="production", ENGRAM_SECRET_KEY=secret())
    assert result.returncode != 0
    assert "engram.E003" in result.stderr and "ENGRAM_AUDIT_KEY" in result.stderr
    assert "engram.E001" not in result.stderr


def test_production_refuses_debug_and_an_audit_key_equal_to_the_secret():
    key = secret()
    result = check(ENGRAM_ENV="production", ENGRAM_SECRET_KEY=key, ENGRAM_AUDIT_KEY=key, ENGRAM_DEBUG="1")
    assert result.returncode != 0
    assert "engram.E002" in result.stderr and "DEBUG" in result.stderr
    assert "engram.E003" in result.stderr
    assert "engram.E001" not in result.stderr


def test_development_starts_on_its_defaults_and_the_deploy_check_names_the_public_key():
    assert check().returncode == 0
    deploy = check("--deploy")
    assert "engram.W001" in deploy.stderr + deploy.stdout


def production(**values: str) -> dict[str, str]:
    """The production profile with the secrets it requires."""
    return {"ENGRAM_ENV": "production", "ENGRAM_SECRET_KEY": secret(), "ENGRAM_AUDIT_KEY": secret(), **values}


def test_production_turns_on_https_only_cookies_hsts_ssl_redirect_and_the_proxy_header():
    loaded = settings_with(**production())
    assert loaded["SESSION_COOKIE_SECURE"] is True and loaded["CSRF_COOKIE_SECURE"] is True
    assert loaded["SECURE_SSL_REDIRECT"] is True
    assert loaded["SECURE_HSTS_SECONDS"] == 31_536_000
    assert loaded["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True and loaded["SECURE_HSTS_PRELOAD"] is True
    assert loaded["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_development_leaves_them_off():
    loaded = settings_with()
    assert not any(loaded[name] for name in SETTINGS[:7])


def test_each_production_setting_and_each_abuse_limit_is_overridable_by_its_variable():
    loaded = settings_with(
        **production(),
        ENGRAM_SESSION_COOKIE_SECURE="0",
        ENGRAM_CSRF_COOKIE_SECURE="0",
        ENGRAM_SSL_REDIRECT="0",
        ENGRAM_HSTS_SECONDS="600",
        ENGRAM_HSTS_INCLUDE_SUBDOMAINS="0",
        ENGRAM_HSTS_PRELOAD="0",
        ENGRAM_PROXY_SSL_HEADER="X-Scheme",
        ENGRAM_LOGIN_FAILURE_LIMIT="7",
        ENGRAM_LOGIN_COOLOFF_MINUTES="30",
        ENGRAM_LOGIN_LOCKOUT_BY="ip_address,username+ip_address",
        ENGRAM_API_RATE="100/second",
    )
    assert not any(loaded[name] for name in SETTINGS[:3])
    assert loaded["SECURE_HSTS_SECONDS"] == 600
    assert loaded["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False and loaded["SECURE_HSTS_PRELOAD"] is False
    assert loaded["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_SCHEME", "https"]
    assert loaded["AXES_FAILURE_LIMIT"] == 7
    assert loaded["AXES_COOLOFF_TIME"] == "0:30:00"
    assert loaded["AXES_LOCKOUT_PARAMETERS"] == [["ip_address"], ["username", "ip_address"]]
    assert loaded["ENGRAM_API_RATE"] == "100/second"
