"""Writes for tenants, agents, credentials and actors."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.models import Actor, ApiKey, RuntimeAgent

API_KEY_PREFIX = "egk"


def api_key_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    api_key: ApiKey
    secret: str  # shown once; only its digest is stored


@transaction.atomic
def api_key_create(*, agent: RuntimeAgent, label: str = "") -> IssuedApiKey:
    """Issue a key for ``agent``. The secret is returned once and never stored."""
    public = secrets.token_hex(4)
    secret = f"{API_KEY_PREFIX}_{public}_{secrets.token_urlsafe(32)}"
    api_key = ApiKey.objects.create(
        agent=agent, label=label, prefix=f"{API_KEY_PREFIX}_{public}", digest=api_key_digest(secret)
    )
    return IssuedApiKey(api_key=api_key, secret=secret)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


@transaction.atomic
def actor_rename(*, actor: Actor, display_name: str) -> Actor:
    """Change how an actor is rendered. Stored memory text never contains the name, so nothing else changes."""
    actor.display_name = display_name
    actor.save(update_fields=["display_name"])
    return actor
