"""``manage.py api_key issue|list|rotate|revoke``: agents' API keys without the admin.

The secret of a new key is printed once, alone on standard output (``KEY=$(manage.py api_key issue
…)``), and never again: only its SHA-256 is stored. Everything else goes to standard error or, for
``list``, shows the public prefix only.

``issue --scope runtime --scope manage`` chooses what the key may call (runtime only without the
option; accounts.authentication); ``rotate`` keeps the old key's scopes and ``list`` shows them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.management.commands._credentials import agent_named, api_key_named, expiry
from accounts.models import ApiKey, ApiScope
from accounts.services import IssuedApiKey, api_key_create, api_key_revoke, api_key_rotate
from config.errors import ServiceError


def _when(moment: datetime | None, never: str = "-") -> str:
    return timezone.localtime(moment).isoformat(timespec="seconds") if moment else never


def key_status(api_key: ApiKey) -> str:
    if api_key.revoked_at is not None:
        return "revoked"
    if api_key.expires_at is not None and api_key.expires_at <= timezone.now():
        return "expired"
    return "live"


class Command(BaseCommand):
    help = "Issue, list, rotate or revoke agents' API keys (the secret is shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        issue = sub.add_parser("issue", help="issue a key for an agent; prints the secret once")
        issue.add_argument("--agent", required=True, help="TENANT/AGENT or the agent's id")
        issue.add_argument("--label", default="", help="what the key is for (shown in lists)")
        issue.add_argument(
            "--scope",
            action="append",
            choices=ApiScope.values,
            dest="scopes",
            help="what the key may call: runtime (an agent runtime's calls; the default) and/or manage (the "
            "memory list and detail); repeat for both",
        )
        rotate = sub.add_parser("rotate", help="replace a live key; revokes the old one")
        for command in (issue, rotate):
            command.add_argument("--expires-in", default=None, help="lifetime: a number and m, h, d or w (90d)")
            command.add_argument("--expires-at", default=None, help="expiry moment, ISO 8601")
        rotate.add_argument("key", help="the key's prefix (egk_…) or id")
        listing = sub.add_parser("list", help="keys by prefix, with status, expiry and last use")
        listing.add_argument("--agent", default=None, help="only this agent's (TENANT/AGENT or id)")
        listing.add_argument("--live", action="store_true", help="only keys that still authenticate")
        revoke = sub.add_parser("revoke", help="revoke a key at once")
        revoke.add_argument("key", help="the key's prefix (egk_…) or id")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "issue":
                agent = agent_named(options["agent"])
                issued = api_key_create(
                    agent=agent,
                    label=options["label"],
                    expires_at=expiry(options["expires_in"], options["expires_at"]),
                    scopes=options["scopes"] or [ApiScope.RUNTIME],
                )
                self.show_secret(issued, "issued")
            elif action == "rotate":
                old = api_key_named(options["key"])
                issued = api_key_rotate(api_key=old, expires_at=expiry(options["expires_in"], options["expires_at"]))
                self.stderr.write(f"revoked {old.prefix}")
                self.show_secret(issued, "issued in its place")
            elif action == "revoke":
                api_key = api_key_named(options["key"])
                was_live = api_key.revoked_at is None
                api_key_revoke(api_key=api_key)
                self.stdout.write(f"revoked {api_key.prefix}" if was_live else f"{api_key.prefix} was already revoked")
            else:
                self.list_keys(options["agent"], live_only=options["live"])
        except ServiceError as error:
            raise CommandError(error.message) from error

    def show_secret(self, issued: IssuedApiKey, verb: str) -> None:
        key = issued.api_key
        agent = key.agent
        self.stderr.write(
            f"{verb} {key.prefix} for {agent.tenant.slug}/{agent.name} (id {key.pk}), scopes {','.join(key.scopes)}, "
            f"expires {_when(key.expires_at, 'never')}. The key follows; it is not shown again:"
        )
        self.stdout.write(issued.secret)

    def list_keys(self, agent_reference: str | None, *, live_only: bool) -> None:
        keys = ApiKey.objects.select_related("agent__tenant").order_by("agent__tenant__slug", "agent__name", "id")
        if agent_reference:
            keys = keys.filter(agent=agent_named(agent_reference))
        self.stdout.write("id\tprefix\tagent\tstatus\tcreated\texpires\tlast used\tscopes\tlabel")
        for key in keys:
            status = key_status(key)
            if live_only and status != "live":
                continue
            self.stdout.write(
                "\t".join(
                    [
                        str(key.pk),
                        key.prefix,
                        f"{key.agent.tenant.slug}/{key.agent.name}",
                        status,
                        _when(key.created_at),
                        _when(key.expires_at, "never"),
                        _when(key.last_used_at, "never"),
                        ",".join(key.scopes),
                        key.label,
                    ]
                )
            )
