"""Agent authentication: ``Authorization: Bearer <api key>``. The key binds the request to one agent;
no endpoint accepts an agent, tenant, perspective or audience parameter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts.models import ApiKey, RuntimeAgent
from accounts.services import api_key_digest
from config.database.base import prepared_cursor

#: ``last_used_at`` is refreshed at most this often, so authentication is not a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
#: Every request authenticates, so the live key and its agent are one hand-written read (the ORM
#: spends several times the round trip compiling the equivalent query).
LIVE_KEY_SQL = (
    "SELECT k.id, k.last_used_at, a.id, a.tenant_id, a.name, a.created_at"
    " FROM accounts_apikey k JOIN accounts_runtimeagent a ON a.id = k.agent_id"
    " WHERE k.digest = %s AND k.revoked_at IS NULL"
    " AND (k.expires_at IS NULL OR k.expires_at > statement_timestamp())"
)
AGENT_FIELDS = ("id", "tenant_id", "name", "created_at")


@dataclass(frozen=True)
class AgentPrincipal:
    """``request.user`` for an authenticated agent runtime."""

    agent: RuntimeAgent
    api_key_id: int
    is_authenticated: bool = True
    is_anonymous: bool = False

    @property
    def pk(self) -> int:
        return self.agent.pk


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[AgentPrincipal, int] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Authorization: Bearer <api key>")
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("invalid API key") from error
        with prepared_cursor() as cursor:
            cursor.execute(LIVE_KEY_SQL, [api_key_digest(secret)])
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed("invalid, revoked or expired API key")
        key_id, last_used_at, *agent_values = row
        agent = RuntimeAgent.from_db(connection.alias, AGENT_FIELDS, agent_values)
        now = timezone.now()
        if last_used_at is None or now - last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key_id).update(last_used_at=now)
        return AgentPrincipal(agent=agent, api_key_id=key_id), key_id

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="engram"'


class IsAgent(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, AgentPrincipal)


def request_agent(request: Request) -> RuntimeAgent:
    user = request.user
    assert isinstance(user, AgentPrincipal)  # guaranteed by IsAgent
    return user.agent


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiKeyAuthentication"
    name = "agentApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An agent's API key (egk_…), issued once."}
