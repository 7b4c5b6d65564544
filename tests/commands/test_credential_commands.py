"""Credentials from the command line: `manage.py tenant`, `agent` and `api_key issue|list|rotate|revoke`.
The secret is printed once, alone on standard output; only its digest is stored; an expired or revoked
key does not authenticate; ``last_used_at`` follows use at most once a minute; ``issue --scope`` chooses
what a key may call (runtime by default), ``list`` shows it and ``rotate`` keeps it."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiKey, RuntimeAgent, Tenant
from accounts.services import api_key_digest

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def status_of(secret: str, path: str = "/api/v1/turns/999999") -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return int(client.get(path).status_code)  # 404 (or 200): authenticated; 401: not; 403: not in scope


@pytest.fixture
def agent() -> RuntimeAgent:
    run("tenant", "create", "Acme Corp")
    run("agent", "create", "--tenant", "acme-corp", "assistant")
    return RuntimeAgent.objects.get(tenant__slug="acme-corp", name="assistant")


def issue(*extra: str) -> str:
    out, _ = run("api_key", "issue", "--agent", "acme-corp/assistant", *extra)
    return out.strip()


def test_tenant_and_agent_are_created_and_listed(agent: RuntimeAgent):
    assert agent.tenant.name == "Acme Corp"
    tenants, _ = run("tenant", "list")
    assert "acme-corp\tAcme Corp" in tenants and "assistant" in tenants
    agents, _ = run("agent", "list", "--tenant", "acme-corp")
    assert agents.split("\t")[0] == "acme-corp/assistant"


def test_a_duplicate_tenant_or_agent_is_refused_and_changes_nothing(agent: RuntimeAgent):
    with pytest.raises(CommandError, match="exists"):
        run("tenant", "create", "Acme Corp")
    with pytest.raises(CommandError, match="has an agent named"):
        run("agent", "create", "--tenant", "acme-corp", "assistant")
    with pytest.raises(CommandError, match="no tenant"):
        run("agent", "create", "--tenant", "nope", "assistant")
    assert Tenant.objects.count() == 1 and RuntimeAgent.objects.count() == 1


def test_an_issued_key_is_printed_once_stored_as_a_digest_and_authenticates(agent: RuntimeAgent):
    secret = issue("--label", "ci")
    assert secret.startswith("egk_") and "\n" not in secret
    key = ApiKey.objects.get(agent=agent)
    assert key.digest == api_key_digest(secret) and secret not in {key.prefix, key.label}
    assert key.label == "ci" and key.expires_at is None
    assert status_of(secret) == 404
    listing, _ = run("api_key", "list")
    assert key.prefix in listing and secret not in listing


def test_an_expiring_key_stops_authenticating_at_its_expiry(agent: RuntimeAgent):
    secret = issue("--expires-in", "30d")
    key = ApiKey.objects.get(agent=agent)
    assert key.expires_at is not None
    assert timedelta(days=29) < key.expires_at - timezone.now() <= timedelta(days=30)
    assert status_of(secret) == 404
    ApiKey.objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert status_of(secret) == 401
    listing, _ = run("api_key", "list", "--agent", "acme-corp/assistant")
    assert "\texpired\t" in listing
    live, _ = run("api_key", "list", "--live")
    assert key.prefix not in live


def test_an_expiry_in_the_past_or_malformed_is_refused(agent: RuntimeAgent):
    with pytest.raises(CommandError, match="future"):
        issue("--expires-at", "2020-01-01T00:00Z")
    with pytest.raises(CommandError, match="--expires-in"):
        issue("--expires-in", "soon")
    assert not ApiKey.objects.exists()


def test_rotate_issues_a_new_key_and_revokes_the_old_one(agent: RuntimeAgent):
    old_secret = issue("--label", "runtime")
    old = ApiKey.objects.get(agent=agent)
    new_secret, err = run("api_key", "rotate", old.prefix)
    new_secret = new_secret.strip()
    assert f"revoked {old.prefix}" in err
    assert status_of(old_secret) == 401
    assert status_of(new_secret) == 404
    new = ApiKey.objects.get(digest=api_key_digest(new_secret))
    assert (new.agent_id, new.label) == (agent.pk, "runtime")
    with pytest.raises(CommandError, match="revoked or expired"):
        run("api_key", "rotate", old.prefix)


def test_revoke_stops_the_key_at_once(agent: RuntimeAgent):
    secret = issue()
    key = ApiKey.objects.get(agent=agent)
    out, _ = run("api_key", "revoke", str(key.pk))
    assert out.strip() == f"revoked {key.prefix}"
    assert status_of(secret) == 401
    again, _ = run("api_key", "revoke", key.prefix)
    assert "already revoked" in again


def test_an_unknown_key_or_agent_is_refused():
    with pytest.raises(CommandError, match="no API key"):
        run("api_key", "revoke", "egk_00000000")
    with pytest.raises(CommandError, match="no agent"):
        run("api_key", "issue", "--agent", "nobody/nothing")


def test_last_used_at_follows_use_at_most_once_a_minute(agent: RuntimeAgent):
    """Authentication refreshes ``last_used_at`` when it is unset or over a minute old, not on every
    request (that would be a write per request on the hot path)."""
    secret = issue()
    key = ApiKey.objects.get(agent=agent)
    assert key.last_used_at is None
    status_of(secret)
    first = ApiKey.objects.get(pk=key.pk).last_used_at
    assert first is not None
    status_of(secret)
    assert ApiKey.objects.get(pk=key.pk).last_used_at == first
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=first - timedelta(minutes=2))
    status_of(secret)
    refreshed = ApiKey.objects.get(pk=key.pk).last_used_at
    assert refreshed is not None and refreshed > first - timedelta(minutes=2)
    listing, _ = run("api_key", "list")
    assert "never" not in listing.splitlines()[1].split("\t")[6]


def test_issue_chooses_the_scopes_runtime_by_default_and_list_and_rotate_keep_them(agent: RuntimeAgent):
    runtime = issue("--label", "runtime")
    both = issue("--scope", "runtime", "--scope", "manage", "--label", "both")
    manage = issue("--scope", "manage", "--label", "manage")
    assert dict(ApiKey.objects.values_list("label", "scopes")) == {
        "runtime": ["runtime"],
        "both": ["runtime", "manage"],
        "manage": ["manage"],
    }
    # (a turn of the runtime API, the management reads): 404 and 200 are allowed, 403 is refused
    assert (status_of(runtime), status_of(runtime, "/api/v1/memories")) == (404, 403)
    assert (status_of(both), status_of(both, "/api/v1/memories")) == (404, 200)
    assert (status_of(manage), status_of(manage, "/api/v1/memories")) == (403, 200)

    listing, _ = run("api_key", "list")
    header, *rows = listing.splitlines()
    column = header.split("\t").index("scopes")
    assert {row.split("\t")[-1]: row.split("\t")[column] for row in rows} == {
        "runtime": "runtime",
        "both": "runtime,manage",
        "manage": "manage",
    }

    rotated, err = run("api_key", "rotate", ApiKey.objects.get(label="manage").prefix)
    assert "scopes manage" in err
    assert ApiKey.objects.get(digest=api_key_digest(rotated.strip())).scopes == ["manage"]

    with pytest.raises(CommandError, match="invalid choice"):
        issue("--scope", "admin")
    assert ApiKey.objects.count() == 4
