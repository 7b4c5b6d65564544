"""Abuse limits: failed-login lockout on the end-user and admin logins (django-axes), and the per-API-key
request rate limit (accounts/throttling.py) answering 429 ``rate_limited`` with ``Retry-After``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from accounts import throttling
from accounts.models import RuntimeAgent
from accounts.services import api_key_create
from history.models import Message
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
LIMIT = 3


@pytest.fixture
def lockout(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def user(username: str, *, staff: bool = False) -> User:
    return User.objects.create_user(username=username, password=PASSWORD, is_staff=staff, is_superuser=staff)


def attempt(client: Client, path: str, username: str, password: str) -> Any:
    return client.post(path, {"username": username, "password": password})


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


LOGINS = [("/login/", False), ("/admin/login/", True)]


@pytest.mark.parametrize(("path", "staff"), LOGINS)
def test_failed_logins_lock_the_login_and_then_refuse_the_right_password(lockout: None, path: str, staff: bool):
    """After the failure limit, the login answers 429 and the right password is refused too."""
    user("alice", staff=staff)
    client = Client()
    for _ in range(LIMIT - 1):
        assert attempt(client, path, "alice", "wrong").status_code == 200
    assert attempt(client, path, "alice", "wrong").status_code == 429
    refused = attempt(client, path, "alice", PASSWORD)
    assert refused.status_code == 429
    assert "Too many failed logins" in refused.content.decode()
    assert not logged_in(client)


@pytest.mark.parametrize(("path", "staff"), LOGINS)
def test_an_operator_reset_unlocks_the_login(lockout: None, path: str, staff: bool):
    """`manage.py axes_reset_username` clears the lockout: the right password works again."""
    user("alice", staff=staff)
    client = Client()
    for _ in range(LIMIT):
        attempt(client, path, "alice", "wrong")
    assert attempt(client, path, "alice", PASSWORD).status_code == 429
    call_command("axes_reset_username", "alice")
    assert attempt(client, path, "alice", PASSWORD).status_code == 302
    assert logged_in(client)


def age_attempts(minutes: int) -> None:
    """Move every recorded attempt ``minutes`` into the past: the cool-off, without waiting for it."""
    from axes.models import AccessAttempt  # type: ignore[import-untyped]

    for row in AccessAttempt.objects.all():
        row.attempt_time -= timedelta(minutes=minutes)
        row.save()


@pytest.mark.parametrize(("path", "staff"), LOGINS)
@pytest.mark.parametrize(("minutes", "status"), [(14, 429), (16, 302)])
def test_the_lockout_ends_after_the_cool_off(lockout: None, path: str, staff: bool, minutes: int, status: int):
    """Failures older than the 15-minute cool-off no longer count; younger ones still lock."""
    user("alice", staff=staff)
    client = Client()
    for _ in range(LIMIT):
        attempt(client, path, "alice", "wrong")
    age_attempts(minutes)
    assert attempt(client, path, "alice", PASSWORD).status_code == status
    assert logged_in(client) is (status == 302)


def test_an_attempt_during_the_lockout_starts_the_cool_off_again(lockout: None):
    """A client that keeps trying stays locked: each refused attempt restarts the cool-off."""
    user("alice")
    client = Client()
    for _ in range(LIMIT):
        attempt(client, "/login/", "alice", "wrong")
    age_attempts(14)
    assert attempt(client, "/login/", "alice", PASSWORD).status_code == 429
    age_attempts(2)
    assert attempt(client, "/login/", "alice", PASSWORD).status_code == 429


def test_the_lockout_is_per_username_and_address(lockout: None):
    """Alice locked out from one address neither locks Bob out there nor Alice from elsewhere, so a
    stranger cannot lock a person out everywhere by guessing their password."""
    user("alice")
    user("bob")
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(LIMIT):
        attempt(attacker, "/login/", "alice", "wrong")
    assert attempt(attacker, "/login/", "alice", PASSWORD).status_code == 429
    assert attempt(attacker, "/login/", "bob", PASSWORD).status_code == 302
    assert attempt(Client(REMOTE_ADDR="198.51.100.7"), "/login/", "alice", PASSWORD).status_code == 302


def test_a_successful_login_resets_the_failure_count(lockout: None):
    user("alice")
    client = Client()
    for _ in range(LIMIT - 1):
        attempt(client, "/login/", "alice", "wrong")
    assert attempt(client, "/login/", "alice", PASSWORD).status_code == 302
    client.logout()
    for _ in range(LIMIT - 1):
        assert attempt(client, "/login/", "alice", "wrong").status_code == 200
    assert attempt(client, "/login/", "alice", PASSWORD).status_code == 302


# --- Per-API-key rate limit ------------------------------------------------------------------------

#: The middle of a one-minute window: the clock is set, never waited for.
NOW = 60 * 29_000_000 + 30.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[float]:
    settings.ENGRAM_API_RATE = f"{LIMIT}/minute"
    now = [NOW]
    monkeypatch.setattr(throttling.time, "time", lambda: now[0])
    return now


def keyed_client(agent: RuntimeAgent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(agent=agent).secret}")
    return client


@pytest.fixture
def agent() -> RuntimeAgent:
    return AgentFactory.create()


def exhaust(client: APIClient) -> Any:
    """The limit's worth of requests (a missing turn: 404, counted all the same), then one more."""
    for _ in range(LIMIT):
        assert client.get("/api/v1/turns/999999").status_code == 404
    return client.get("/api/v1/turns/999999")


def test_a_key_over_its_rate_answers_429_rate_limited_with_retry_after(clock: list[float], agent: RuntimeAgent):
    refused = exhaust(keyed_client(agent))
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "rate_limited"
    assert set(body) == {"code", "message", "detail"}
    retry_after = int(refused["Retry-After"])
    assert retry_after >= 1
    assert body["detail"] == {"retry_after_s": retry_after}


def test_the_limit_is_per_key(clock: list[float], agent: RuntimeAgent):
    """Another key, of the same agent or another one, is not slowed by a key that hit its limit."""
    assert exhaust(keyed_client(agent)).status_code == 429
    assert keyed_client(agent).get("/api/v1/turns/999999").status_code == 404
    assert keyed_client(AgentFactory.create()).get("/api/v1/turns/999999").status_code == 404


def test_a_refused_write_changes_nothing(clock: list[float], agent: RuntimeAgent):
    client = keyed_client(agent)
    assert exhaust(client).status_code == 429
    before = Message.objects.count()
    response = client.post(
        "/api/v1/messages",
        {
            "messages": [
                {
                    "connector": {"type": "slack", "name": "acme"},
                    "thread": {"external_id": "C1", "audience": {"kind": "workspace"}},
                    "actor": {"external_id": "U1", "display_name": "Victor"},
                    "external_id": "1",
                    "body": "hello",
                    "created_at": "2026-11-30T09:00:00Z",
                    "evidence": {"method": "connector_signed"},
                }
            ]
        },
        format="json",
    )
    assert response.status_code == 429 and response.json()["code"] == "rate_limited"
    assert Message.objects.count() == before


def test_the_key_is_served_again_after_retry_after_and_not_before(clock: list[float], agent: RuntimeAgent):
    """The window slides: one second short of Retry-After is still refused; at Retry-After the key is
    served (checked on two keys, since a refused request counts too)."""
    early, punctual = keyed_client(agent), keyed_client(agent)
    retry_after = int(exhaust(early)["Retry-After"])
    assert int(exhaust(punctual)["Retry-After"]) == retry_after
    clock[0] = NOW + retry_after - 1
    assert early.get("/api/v1/turns/999999").status_code == 429
    clock[0] = NOW + retry_after
    assert punctual.get("/api/v1/turns/999999").status_code == 404


def test_no_limit_counts_nothing(settings: Any, agent: RuntimeAgent):
    settings.ENGRAM_API_RATE = "off"
    client = keyed_client(agent)
    for _ in range(LIMIT * 3):
        assert client.get("/api/v1/turns/999999").status_code == 404
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {throttling.TABLE}")
        assert cursor.fetchone() == (0,)


def test_the_counts_live_in_an_unlogged_table():
    """No WAL and no flush for each request's count (its contents may be lost in a crash, by design)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpersistence FROM pg_class WHERE relname = %s", [throttling.TABLE])
        assert cursor.fetchone() == ("u",)


@pytest.mark.parametrize("rate", ["6000", "x/minute", "10/fortnight", "0/minute"])
def test_a_malformed_rate_is_a_configuration_error(rate: str):
    with pytest.raises(ImproperlyConfigured):
        throttling.parse_rate(rate)


def test_rates_parse():
    assert throttling.parse_rate("6000/minute") == (6000, 60)
    assert throttling.parse_rate("10/s") == (10, 1)
    assert throttling.parse_rate(" OFF ") is None
