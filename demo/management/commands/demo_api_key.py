"""Print a fresh API key for the demo agent (``load_demo``'s acme-assistant), for the run banner.

Only a database holding the demo workspace has that agent; elsewhere the command prints nothing and
exits 0, so ``scripts/run`` shows no key. Keys are stored hashed, so each call issues a new one and
revokes the demo keys of its kind issued before it: one demo key of each kind is valid at a time.

The run banner's key is a runtime key (what an agent runtime calls). ``--manage`` issues the other
kind, which adds the manage scope for the management reads of the demo agent's memories (``GET
/api/v1/memories``), without revoking the banner's key.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from accounts.models import ApiKey, ApiScope, RuntimeAgent
from accounts.services import api_key_create, api_key_revoke
from demo.management.commands.load_demo import AGENT_NAME, TENANT_SLUG

LABEL = "demo (run banner)"
MANAGE_LABEL = "demo (runtime and manage)"


class Command(BaseCommand):
    help = "Issue an API key for the demo agent and print it (nothing without the demo workspace)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--manage", action="store_true", help="add the manage scope (the memory list and detail) to the runtime one"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        agent = RuntimeAgent.objects.filter(tenant__slug=TENANT_SLUG, name=AGENT_NAME).first()
        if agent is None:
            return
        label, scopes = (MANAGE_LABEL, ApiScope.values) if options["manage"] else (LABEL, [ApiScope.RUNTIME])
        with transaction.atomic():
            for old in ApiKey.objects.filter(agent=agent, label=label, revoked_at__isnull=True):
                api_key_revoke(api_key=old)
            secret = api_key_create(agent=agent, label=label, scopes=scopes).secret
        self.stdout.write(secret)
