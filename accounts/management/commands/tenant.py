"""``manage.py tenant create|list``: tenants from the command line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Tenant
from accounts.services import tenant_create
from config.errors import ServiceError


class Command(BaseCommand):
    help = "Create or list tenants."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a tenant")
        create.add_argument("name", help="display name, e.g. 'Acme Corp'")
        create.add_argument("--slug", default="", help="unique short name (default: from the name)")
        sub.add_parser("list", help="every tenant with its agents")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "create":
            try:
                tenant = tenant_create(name=options["name"], slug=options["slug"])
            except ServiceError as error:
                raise CommandError(error.message) from error
            self.stdout.write(f"created tenant {tenant.slug} ({tenant.name}, id {tenant.pk})")
            return
        for tenant in Tenant.objects.prefetch_related("agents").order_by("slug"):
            agents = ", ".join(sorted(agent.name for agent in tenant.agents.all())) or "no agents"
            self.stdout.write(f"{tenant.slug}\t{tenant.name}\tid {tenant.pk}\t{agents}")
