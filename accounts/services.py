"""Writes for tenants, agents, credentials and actors."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from accounts.models import Actor, ApiKey, ApiScope, RuntimeAgent, Tenant
from config.errors import Conflict, ServiceError
from config.text import clean_name

API_KEY_PREFIX = "egk"


def api_key_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    api_key: ApiKey
    secret: str  # shown once; only its digest is stored


@transaction.atomic
def tenant_create(*, name: str, slug: str = "") -> Tenant:
    """A new tenant; ``slug`` defaults to the name's slug. An existing slug is a conflict, not a reuse."""
    name = name.strip()
    slug = slug.strip() or slugify(name)
    if not name or not slug:
        raise ServiceError("a tenant needs a name (and a slug made of letters, digits, - or _)")
    if Tenant.objects.filter(slug=slug).exists():
        raise Conflict(f"a tenant with the slug {slug!r} exists", code="tenant_exists")
    return Tenant.objects.create(name=name, slug=slug)


@transaction.atomic
def agent_create(*, tenant: Tenant, name: str) -> RuntimeAgent:
    """A new runtime agent (a perspective of its own) in ``tenant``; names are unique per tenant."""
    name = name.strip()
    if not name:
        raise ServiceError("an agent needs a name")
    if RuntimeAgent.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(f"tenant {tenant.slug!r} has an agent named {name!r}", code="agent_exists")
    return RuntimeAgent.objects.create(tenant=tenant, name=name)


def api_key_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes a key is stored with: known ones, at least one, each once, in ``ApiScope`` order."""
    asked = set(scopes)
    unknown = sorted(asked - set(ApiScope.values))
    if unknown:
        raise ServiceError(
            f"unknown API key scope(s): {', '.join(unknown)} (known: {', '.join(ApiScope.values)})",
            code="unknown_scope",
        )
    if not asked:
        raise ServiceError("an API key needs at least one scope", code="unknown_scope")
    return [scope for scope in ApiScope.values if scope in asked]


@transaction.atomic
def api_key_create(
    *,
    agent: RuntimeAgent,
    label: str = "",
    expires_at: datetime | None = None,
    scopes: Iterable[str] = (ApiScope.RUNTIME,),
) -> IssuedApiKey:
    """Issue a key for ``agent`` with ``scopes`` (runtime only unless asked), valid until ``expires_at``
    (None: until revoked). The secret is returned once and never stored."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ServiceError("an API key's expiry must be in the future", code="expiry_in_past")
    stored_scopes = api_key_scopes(scopes)
    public = secrets.token_hex(4)
    secret = f"{API_KEY_PREFIX}_{public}_{secrets.token_urlsafe(32)}"
    api_key = ApiKey.objects.create(
        agent=agent,
        label=label,
        prefix=f"{API_KEY_PREFIX}_{public}",
        digest=api_key_digest(secret),
        expires_at=expires_at,
        scopes=stored_scopes,
    )
    return IssuedApiKey(api_key=api_key, secret=secret)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


@transaction.atomic
def api_key_rotate(*, api_key: ApiKey, expires_at: datetime | None = None) -> IssuedApiKey:
    """Replace a live key: a new key for the same agent, label and scopes, and the old one revoked in the same
    transaction, so there is never a moment with both or neither. A revoked or expired key is not
    rotated (issue a new one instead): rotation must not bring a dead credential back."""
    locked = ApiKey.objects.select_for_update().get(pk=api_key.pk)
    if locked.revoked_at is not None or (locked.expires_at is not None and locked.expires_at <= timezone.now()):
        raise Conflict(f"the key {locked.prefix} is revoked or expired; issue a new one", code="api_key_not_live")
    issued = api_key_create(agent=locked.agent, label=locked.label, expires_at=expires_at, scopes=locked.scopes)
    api_key_revoke(api_key=locked)
    return issued


@transaction.atomic
def actor_rename(*, actor: Actor, display_name: str) -> Actor:
    """Change how an actor is rendered. Stored memory text never contains the name, so nothing else changes.
    The name is cleaned as ingest cleans it (``config.text.clean_name``); one that cleans to nothing
    becomes the external id, as a first sighting without a name does."""
    actor.display_name = clean_name(display_name) or actor.external_id
    actor.save(update_fields=["display_name"])
    return actor
