"""The production profile's refusals, as Django system checks.

The rule is ``config.production.production_problems``. With ``ENGRAM_ENV=production`` the settings
module applies it while it loads and refuses to load at all, so with the environment's values these
checks cannot fail; they report the same problems (the same ids, messages and hints) when the
settings were changed after loading (``override_settings``, a settings module of one's own that
imports Engram's and changes them). Outside production they are silent: the development defaults are
what a fresh checkout runs on.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from config.production import production_problems


@register("security")
def production_profile(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not settings.PRODUCTION:
        return []
    problems = production_problems(
        secret_key=settings.SECRET_KEY, debug=settings.DEBUG, audit_key=settings.ENGRAM_AUDIT_KEY
    )
    return [Error(problem.message, hint=problem.hint, id=problem.id) for problem in problems]


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
