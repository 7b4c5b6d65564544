"""Agent authentication: ``Authorization: Bearer <api key>``. The key binds the request to one agent;
no endpoint accepts an agent, tenant, perspective or audience parameter.

A key also carries scopes (``ApiKey.scopes``): ``runtime`` for what an agent runtime calls (messages,
sessions, turns, rounds, the ledger, replies, tools, traces) and ``manage`` for the management reads
of the agent's memories. Every agent endpoint requires one through its permission classes: the
settings' default is ``[IsAgent, RuntimeScope]``, so an endpoint that says nothing is a runtime one,
and the management API declares ``ManageScope``. A key without the scope answers ``403
insufficient_scope`` naming it, before the view runs, so nothing is read or written.
"""

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

from accounts.models import ApiKey, ApiScope, RuntimeAgent
from accounts.services import api_key_digest
from config.database.base import prepared_cursor
from config.errors import Forbidden

#: ``last_used_at`` is refreshed at most this often, so authentication is not a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
#: Every request authenticates, so the live key and its agent are one hand-written read (the ORM
#: spends several times the round trip compiling the equivalent query).
LIVE_KEY_SQL = (
    "SELECT k.id, k.last_used_at, k.scopes, a.id, a.tenant_id, a.name, a.created_at"
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
    scopes: frozenset[str] = frozenset()
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
        key_id, last_used_at, scopes, *agent_values = row
        agent = RuntimeAgent.from_db(connection.alias, AGENT_FIELDS, agent_values)
        now = timezone.now()
        if last_used_at is None or now - last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key_id).update(last_used_at=now)
        return AgentPrincipal(agent=agent, api_key_id=key_id, scopes=frozenset(scopes)), key_id

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="engram"'


class IsAgent(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, AgentPrincipal)


class HasScope(BasePermission):
    """The API key carries ``scope``. Listed after ``IsAgent``, which answers 401 without a key."""

    scope: ApiScope

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not isinstance(user, AgentPrincipal):
            return False
        if self.scope not in user.scopes:
            # Raised rather than returned: DRF's own refusal would carry the generic code "forbidden".
            raise Forbidden(
                f"this API key lacks the {self.scope.value!r} scope this endpoint requires; "
                f"issue a key with it (manage.py api_key issue --scope {self.scope.value})",
                code="insufficient_scope",
                detail={"required_scope": self.scope.value, "key_scopes": sorted(user.scopes)},
            )
        return True


class RuntimeScope(HasScope):
    """What an agent runtime calls; the default of every agent endpoint (settings.REST_FRAMEWORK)."""

    scope = ApiScope.RUNTIME


class ManageScope(HasScope):
    """The management reads of an agent's memories."""

    scope = ApiScope.MANAGE


def request_principal(request: Request) -> AgentPrincipal:
    user = request.user
    assert isinstance(user, AgentPrincipal)  # guaranteed by IsAgent
    return user


def request_agent(request: Request) -> RuntimeAgent:
    return request_principal(request).agent


def required_scope(view_class: Any) -> ApiScope | None:
    """The scope an API view requires, from its permission classes (None: not an agent endpoint)."""
    for permission in getattr(view_class, "permission_classes", ()):
        if isinstance(permission, type) and issubclass(permission, HasScope):
            return permission.scope
    return None


def document_scopes(result: dict[str, Any], generator: Any, **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular post-processing: each agent operation names the scope it requires
    (``x-required-scope``, and a sentence in its description) and documents the 403 a key without it
    receives."""
    paths = result.get("paths", {})
    for path, _regex, method, view in generator.endpoints:
        scope = required_scope(getattr(view, "cls", None))
        operation = paths.get(path, {}).get(method.lower())
        if scope is None or operation is None:
            continue
        operation["x-required-scope"] = scope.value
        sentence = f"Requires an API key with the `{scope.value}` scope."
        operation["description"] = f"{operation.get('description', '')}\n\n{sentence}".strip()
        responses = operation.setdefault("responses", {})
        responses.setdefault(
            "403",
            {
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                "description": f"insufficient_scope: the API key lacks the `{scope.value}` scope",
            },
        )
    return result


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiKeyAuthentication"
    name = "agentApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An agent's API key (egk_…), issued once."}
