"""``manage.py agent create|list``: runtime agents from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.management.commands._credentials import tenant_named
from accounts.models import RuntimeAgent
from accounts.services import agent_create
from config.errors import ServiceError


class Command(BaseCommand):
    help = "Create or list runtime agents (each is a perspective with its own memories)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create an agent in a tenant")
        create.add_argument("--tenant", required=True, help="the tenant's slug")
        create.add_argument("name", help="the agent's name, unique in its tenant")
        listing = sub.add_parser("list", help="agents, as TENANT/AGENT")
        listing.add_argument("--tenant", default=None, help="only this tenant's")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            tenant = tenant_named(options["tenant"])
            try:
                agent = agent_create(tenant=tenant, name=options["name"])
            except ServiceError as error:
                raise CommandError(error.message) from error
            self.stdout.write(f"created agent {tenant.slug}/{agent.name} (id {agent.pk})")
            return
        agents = RuntimeAgent.objects.select_related("tenant").order_by("tenant__slug", "name")
        if options["tenant"]:
            agents = agents.filter(tenant=tenant_named(options["tenant"]))
        for agent in agents:
            self.stdout.write(f"{agent.tenant.slug}/{agent.name}\tid {agent.pk}")
