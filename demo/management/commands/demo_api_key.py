"""Print a fresh API key for the demo agent (``load_demo``'s acme-assistant), for the run banner.

Only a database holding the demo workspace has that agent; elsewhere the command prints nothing and
exits 0, so ``scripts/run`` shows no key. Keys are stored hashed, so each call issues a new one and
revokes the demo keys issued before it: one demo key is valid at a time.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.models import ApiKey, RuntimeAgent
from accounts.services import api_key_create, api_key_revoke
from demo.management.commands.load_demo import AGENT_NAME, TENANT_SLUG

LABEL = "demo (run banner)"


class Command(BaseCommand):
    help = "Issue an API key for the demo agent and print it (nothing without the demo workspace)."

    def handle(self, *args: Any, **options: Any) -> None:
        agent = RuntimeAgent.objects.filter(tenant__slug=TENANT_SLUG, name=AGENT_NAME).first()
        if agent is None:
            return
        with transaction.atomic():
            for old in ApiKey.objects.filter(agent=agent, label=LABEL, revoked_at__isnull=True):
                api_key_revoke(api_key=old)
            secret = api_key_create(agent=agent, label=LABEL).secret
        self.stdout.write(secret)
