"""The production profile's refusals, as Django system checks.

With ``ENGRAM_ENV=production`` every ``manage.py`` command that runs the system checks (``check``,
``migrate``, so also ``scripts/run``) stops with an error and a non-zero exit instead of starting
with a secret anyone can read: the development ``SECRET_KEY`` is in this repository, ``DEBUG`` shows
settings and source to whoever triggers an error, and an audit key equal to the secret key means the
one leaked value both forges sessions and reverses the audit digests. Outside production they are
silent: the development defaults are what a fresh checkout runs on.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register


@register("security")
def production_profile(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not settings.PRODUCTION:
        return []
    errors: list[CheckMessage] = []
    if not settings.SECRET_KEY or settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
        errors.append(
            Error(
                "ENGRAM_ENV=production with the development SECRET_KEY, which is public.",
                hint="Set ENGRAM_SECRET_KEY to a random value of at least 50 characters, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
                id="engram.E001",
            )
        )
    if settings.DEBUG:
        errors.append(
            Error(
                "ENGRAM_ENV=production with DEBUG on: error pages would show settings and source.",
                hint="Unset ENGRAM_DEBUG (or set it to 0).",
                id="engram.E002",
            )
        )
    if settings.ENGRAM_AUDIT_KEY and settings.ENGRAM_AUDIT_KEY == settings.SECRET_KEY:
        errors.append(
            Error(
                "ENGRAM_ENV=production with ENGRAM_AUDIT_KEY equal to SECRET_KEY: one leaked value would "
                "both forge sessions and reverse audit digests.",
                hint="Set ENGRAM_AUDIT_KEY to another random value (or to an empty string for no digests).",
                id="engram.E003",
            )
        )
    return errors


@register("security", deploy=True)
def development_secret_under_deploy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy` outside the production profile still names the public key: Django's own check
    passes it (it is long and varied), and a deployment that forgot ENGRAM_ENV would run on it."""
    if settings.PRODUCTION or settings.SECRET_KEY != settings.DEVELOPMENT_SECRET_KEY:
        return []
    return [
        Warning(
            "SECRET_KEY is the public development key.",
            hint="Set ENGRAM_SECRET_KEY, and ENGRAM_ENV=production to have the production profile enforce it.",
            id="engram.W001",
        )
    ]
