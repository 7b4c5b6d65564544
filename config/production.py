"""The production profile's rule: which secrets and switches ``ENGRAM_ENV=production`` refuses.

One rule, two callers. ``config/settings.py`` applies it while it loads and raises
``ImproperlyConfigured`` naming every problem, so nothing that loads the settings (gunicorn's
``config.wsgi``, ``config.asgi``, a Celery worker reading its configuration, every ``manage.py``
command) can start with them. ``config/checks.py`` reports the same problems as system checks, for
settings changed after loading.

Refused under the production profile:

- ``engram.E001``: ``SECRET_KEY`` empty or the development key, which is in this repository;
- ``engram.E002``: ``DEBUG`` on, whose error pages show settings and source;
- ``engram.E003``: an audit key shared with something else. ``ENGRAM_AUDIT_KEY`` unset is derived
  from ``SECRET_KEY`` (:func:`derived_audit_key`), so one leaked secret would both forge sessions
  and reverse the audit digests; derived from the development key it is public. So the key must be
  set to a value of its own: refused when it equals ``SECRET_KEY``, the value derived from
  ``SECRET_KEY`` (unset, or set to that value), or the value derived from the development key. An
  empty key is accepted: it is an explicit choice of no digests, and leaks nothing.

Nothing here reads the environment: the settings module reads it and passes the values in.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

#: Public, so never a secret: the production profile refuses it.
DEVELOPMENT_SECRET_KEY = "engram-local-development-key-change-me-in-production"
_AUDIT_KEY_LABEL = b"engram audit digests"


def derived_audit_key(secret_key: str) -> str:
    """The audit key used when ``ENGRAM_AUDIT_KEY`` is unset: derived from the secret key under a label
    of its own, so it never equals the secret itself."""
    return hmac.new(secret_key.encode(), _AUDIT_KEY_LABEL, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class ProductionProblem:
    id: str
    message: str
    #: What to set, naming the variable.
    hint: str

    def __str__(self) -> str:
        return f"{self.id}: {self.message} {self.hint}"


def production_problems(*, secret_key: str, debug: bool, audit_key: str) -> list[ProductionProblem]:
    """What the production profile refuses in these values (empty: nothing)."""
    problems = []
    if not secret_key or secret_key == DEVELOPMENT_SECRET_KEY:
        problems.append(
            ProductionProblem(
                "engram.E001",
                "ENGRAM_ENV=production with the development SECRET_KEY, which is public (or with an empty one).",
                "Set ENGRAM_SECRET_KEY to a random value of at least 50 characters, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
            )
        )
    if debug:
        problems.append(
            ProductionProblem(
                "engram.E002",
                "ENGRAM_ENV=production with DEBUG on: error pages would show settings and source.",
                "Unset ENGRAM_DEBUG (or set it to 0).",
            )
        )
    shared = {secret_key, derived_audit_key(secret_key), derived_audit_key(DEVELOPMENT_SECRET_KEY)}
    if audit_key and audit_key in shared:
        problems.append(
            ProductionProblem(
                "engram.E003",
                "ENGRAM_ENV=production with an audit key that is not a secret of its own: ENGRAM_AUDIT_KEY "
                "unset (derived from SECRET_KEY), equal to SECRET_KEY or to a value derived from it or from "
                "the development key. One leaked value would both forge sessions and reverse the audit digests.",
                "Set ENGRAM_AUDIT_KEY to another random value (or to an empty string for no digests).",
            )
        )
    return problems


def refusal_message(problems: list[ProductionProblem]) -> str:
    lines = [f"ENGRAM_ENV=production refuses to start ({len(problems)} problem(s); docs/operations.md):"]
    lines += [f"  - {problem}" for problem in problems]
    return "\n".join(lines)
