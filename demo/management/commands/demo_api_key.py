"""Print the API key of the demo agent (``load_demo``'s acme-assistant), for the run banner.

Only a database holding the demo workspace has that agent; elsewhere the command prints nothing and
exits 0, so ``scripts/run`` shows no key.

The key is stable across restarts of the same data folder: keys are stored hashed, so the secret is
kept in the data folder (``ENGRAM_VAR_DIR``, file mode 0600) and printed again while it is still a live
key of the demo agent with the scopes of its kind, so an exported ``ENGRAM_API_KEY`` or an MCP host's
configuration keeps working. Only when the file is missing or its key is no longer valid (revoked,
expired, or from a database since rebuilt) is a new key issued, the demo keys of its kind issued before
it revoked, and the file rewritten: one demo key of each kind is valid at a time. ``--rotate`` replaces
a valid key too (``scripts/run --rotate-demo-key``); the old one answers 401 from then on.

The run banner's key is a runtime key (what an agent runtime calls). ``--manage`` prints the other
kind, which adds the manage scope for the management reads of the demo agent's memories (``GET
/api/v1/memories``), kept in its own file, without touching the banner's key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiKey, ApiScope, RuntimeAgent
from accounts.services import api_key_create, api_key_digest, api_key_revoke
from demo.management.commands.load_demo import AGENT_NAME, TENANT_SLUG

LABEL = "demo (run banner)"
MANAGE_LABEL = "demo (runtime and manage)"
#: The files in the data folder that keep each kind's secret.
KEY_FILE = "demo-api-key"
MANAGE_KEY_FILE = "demo-manage-api-key"


def key_path(*, manage: bool = False) -> Path:
    return Path(settings.VAR_DIR) / (MANAGE_KEY_FILE if manage else KEY_FILE)


def _kept_secret(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


def _is_live(agent: RuntimeAgent, secret: str, label: str, scopes: list[str]) -> bool:
    """Whether ``secret`` still authenticates as this demo key: the agent's, of this kind, unrevoked and
    unexpired."""
    live = ApiKey.objects.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
        agent=agent,
        label=label,
        digest=api_key_digest(secret),
        revoked_at__isnull=True,
    ).first()
    return live is not None and sorted(live.scopes) == sorted(scopes)


def _keep(path: Path, secret: str) -> None:
    """Write the secret readable by its owner only, replacing the file in one step (never a moment
    with a half-written or world-readable key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(secret + "\n")
        os.chmod(partial, 0o600)  # whatever the umask or a stale file's mode
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


class Command(BaseCommand):
    help = "Print the demo agent's API key, issuing one when none is kept (nothing without the demo workspace)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--manage", action="store_true", help="add the manage scope (the memory list and detail) to the runtime one"
        )
        parser.add_argument(
            "--rotate", action="store_true", help="issue a new key and revoke the kept one, even while it is valid"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        agent = RuntimeAgent.objects.filter(tenant__slug=TENANT_SLUG, name=AGENT_NAME).first()
        if agent is None:
            return
        manage = options["manage"]
        label, scopes = (MANAGE_LABEL, list(ApiScope.values)) if manage else (LABEL, [ApiScope.RUNTIME.value])
        path = key_path(manage=manage)
        with transaction.atomic():
            secret = _kept_secret(path)
            if options["rotate"] or not secret or not _is_live(agent, secret, label, scopes):
                for old in ApiKey.objects.select_for_update().filter(agent=agent, label=label, revoked_at__isnull=True):
                    api_key_revoke(api_key=old)
                secret = api_key_create(agent=agent, label=label, scopes=scopes).secret
                # Kept before the commit: if the file cannot be written, no key is issued or revoked.
                _keep(path, secret)
            elif path.stat().st_mode & 0o077:
                path.chmod(0o600)
        self.stdout.write(secret)
