"""``manage.py provision_demo``: the demo superuser and the demo workspace, where (and only where) they
belong. This is the demo step of ``scripts/run``.

The demo's credentials are public (``admin`` / ``engram-demo`` unless ``ENGRAM_ADMIN_PASSWORD``, and
the end users of ``load_demo``), so they are written only into the embedded database a fresh checkout
runs on, outside the production profile, or anywhere with the explicit opt-in ``ENGRAM_LOAD_DEMO=1``
(``scripts/run --demo``). ``ENGRAM_LOAD_DEMO=0`` turns them off everywhere. Pointed at an external
``DATABASE_URL`` without the opt-in, the command refuses (``--if-allowed``: says so and exits 0) and
writes nothing.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction


def demo_refusal() -> str | None:
    """Why the demo must not be provisioned here, or None when it may."""
    if settings.ENGRAM_LOAD_DEMO is True:
        return None
    if settings.ENGRAM_LOAD_DEMO is False:
        return "ENGRAM_LOAD_DEMO=0"
    if not settings.ENGRAM_DATABASE_IS_EMBEDDED:
        return "the database is an external DATABASE_URL (opt in with ENGRAM_LOAD_DEMO=1 or scripts/run --demo)"
    if settings.PRODUCTION:
        return "ENGRAM_ENV=production (opt in with ENGRAM_LOAD_DEMO=1 or scripts/run --demo)"
    return None


class Command(BaseCommand):
    help = "Create the demo superuser and load the demo workspace, only where that is allowed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-allowed", action="store_true", help="where it is not allowed, say why and exit 0 instead of failing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        refusal = demo_refusal()
        if refusal is not None:
            message = f"demo not loaded: {refusal}; no demo users were created"
            if options["if_allowed"]:
                self.stdout.write(message)
                return
            raise CommandError(message)
        with transaction.atomic():
            # The demo superuser always gets the configured password, so the printed credentials hold.
            user, created = get_user_model().objects.get_or_create(
                username="admin", defaults={"email": "admin@example.com"}
            )
            user.is_staff = user.is_superuser = user.is_active = True
            user.set_password(settings.ENGRAM_ADMIN_PASSWORD)
            user.save()
        self.stdout.write("created the demo superuser admin" if created else "demo superuser admin present")
        call_command("load_demo", stdout=self.stdout)
        self.stdout.write(f"demo loaded: admin password {settings.ENGRAM_ADMIN_PASSWORD!r}")
