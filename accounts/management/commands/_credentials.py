"""What the credential commands share: finding a tenant, an agent or a key from its command-line name."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ApiKey, RuntimeAgent, Tenant

DURATION = re.compile(r"^(\d+)([mhdw])$")
UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def tenant_named(slug: str) -> Tenant:
    try:
        return Tenant.objects.get(slug=slug)
    except Tenant.DoesNotExist:
        raise CommandError(f"no tenant with the slug {slug!r} (manage.py tenant list)") from None


def agent_named(reference: str) -> RuntimeAgent:
    """``tenant-slug/agent-name``, or the agent's id."""
    if reference.isdigit():
        agent = RuntimeAgent.objects.select_related("tenant").filter(pk=int(reference)).first()
    elif "/" in reference:
        slug, name = reference.split("/", 1)
        agent = RuntimeAgent.objects.select_related("tenant").filter(tenant__slug=slug, name=name).first()
    else:
        raise CommandError(f"name an agent as TENANT/AGENT or by its id, not {reference!r}")
    if agent is None:
        raise CommandError(f"no agent {reference!r} (manage.py agent list)")
    return agent


def api_key_named(reference: str) -> ApiKey:
    """A key by its public prefix (``egk_…``, as listed) or its id; never by the secret."""
    keys = ApiKey.objects.select_related("agent__tenant")
    matches = list(keys.filter(pk=int(reference))) if reference.isdigit() else list(keys.filter(prefix=reference))
    if not matches:
        raise CommandError(f"no API key {reference!r} (manage.py api_key list)")
    if len(matches) > 1:
        raise CommandError(f"{len(matches)} keys share the prefix {reference!r}; name one by its id")
    return matches[0]


def expiry(expires_in: str | None, expires_at: str | None) -> datetime | None:
    """The expiry moment from ``--expires-in 90d`` (m, h, d or w) or ``--expires-at`` (ISO 8601)."""
    if expires_in and expires_at:
        raise CommandError("give --expires-in or --expires-at, not both")
    if expires_in:
        match = DURATION.match(expires_in.strip())
        if match is None:
            raise CommandError(f"--expires-in takes a number and a unit (m, h, d, w), e.g. 90d, not {expires_in!r}")
        return timezone.now() + timedelta(**{UNITS[match[2]]: int(match[1])})
    if expires_at:
        moment = parse_datetime(expires_at)
        if moment is None:
            raise CommandError(f"--expires-at takes an ISO 8601 moment, e.g. 2027-06-30T00:00Z, not {expires_at!r}")
        return moment if timezone.is_aware(moment) else timezone.make_aware(moment)
    return None
