"""``engram-mcp --transport streamable-http``: one endpoint (``/mcp``) for remote MCP hosts, each caller
authenticated with its own Engram API key.

- Every HTTP request carries ``Authorization: Bearer <Engram API key>``. Without one the answer is
  ``401`` with ``WWW-Authenticate: Bearer``, before any MCP handling.
- The request that opens an MCP session (no ``mcp-session-id`` yet: the ``initialize`` POST) has its
  key checked with Engram once, by reading the caller's tool listing (``GET /api/v1/tools``, which the
  tool list needs anyway); Engram answering 401 is a 401 here, and nothing is opened.
- One MCP session is one Engram session: its own :class:`AsyncEngram` bound to that caller's key and
  its own :class:`EngramMcp` state (the open turn, the session snapshot), held by session id and
  dropped when the SDK ends the MCP session (DELETE, idle timeout, crash). A request for a session
  presenting another key than the one that opened it answers as an unknown session does (404): one
  caller never reaches another's turn, nor learns that it exists.
- The 2026-07-28 protocol has no sessions (every request stands alone), so it cannot carry a turn
  across tool calls: its requests are answered ``-32022`` naming the handshake-era versions, on which
  the SDK's clients fall back to ``initialize``.

The conversation every session speaks in is named by the command's flags (the same for all
sessions); each caller's key makes it that caller's agent's conversation.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    JSONRPCError,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from engram_client._http import DEFAULT_TIMEOUT
from engram_client.client import AsyncEngram
from engram_client.errors import AuthenticationError, EngramError, PermissionDeniedError
from engram_client.mcp_server import Config, EngramMcp, build_server

PATH = "/mcp"
#: Where the gate leaves the request's :class:`EngramMcp` for the SDK's handlers (``ctx.request.scope``).
SCOPE_KEY = "engram.mcp"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if kind.lower() == "bearer" and token else None
    return None


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode("ascii")
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == wanted), None)


def _unauthorized(error: str | None, description: str, status: int = 401) -> Response:
    challenge = 'Bearer realm="engram"' + (f', error="{error}", error_description="{description}"' if error else "")
    return JSONResponse(
        {"error": error or "invalid_request", "error_description": description},
        status_code=status,
        headers={"WWW-Authenticate": challenge},
    )


def _jsonrpc_error(status: int, code: int, message: str, data: Any = None) -> Response:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message, data=data))
    return Response(
        body.model_dump_json(by_alias=True, exclude_none=True), status_code=status, media_type="application/json"
    )


@dataclass(frozen=True)
class Caller:
    """One MCP session's Engram side: the key it was opened with (its digest) and its own state."""

    key_digest: bytes
    state: EngramMcp


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, telling the gate when a session ends, however it ends. ``mcp`` is
    pinned (2.3.0): ``_discard_session`` is the one place every ending goes through (the client's
    DELETE, the idle timeout, a crash, a refused opening request)."""

    def __init__(self, gate: HttpGate, **options: Any) -> None:
        super().__init__(**options)
        self._gate = gate

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._gate.forget(session_id)
        await super()._discard_session(session_id, transport)


class HttpGate:
    """The ``/mcp`` endpoint: authenticates every request and binds it to its MCP session's state
    before the SDK's session manager sees it."""

    def __init__(self, defaults: Config, http: httpx.AsyncClient, *, host: str = "127.0.0.1") -> None:
        self.defaults = defaults
        self.http = http  # one connection pool; every session's AsyncEngram sends its own key
        self.sessions: dict[str, Caller] = {}
        security = None
        if host in ("127.0.0.1", "localhost", "::1"):
            # As the SDK's own app does on a loopback address: DNS-rebinding protection.
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        server = build_server(self.state_of)
        self.manager = SessionManager(self, app=server, security_settings=security)

    @staticmethod
    def state_of(ctx: ServerRequestContext[Any]) -> EngramMcp:
        assert ctx.request is not None, "every MCP message over HTTP comes with its request"
        state: EngramMcp = ctx.request.scope[SCOPE_KEY]
        return state

    def forget(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with self.manager.run():
                yield

        return Starlette(routes=[Route(PATH, endpoint=self)], lifespan=lifespan)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = _bearer(scope)
        if key is None:
            await _unauthorized(None, "an Engram API key is required: Authorization: Bearer <key>")(
                scope, receive, send
            )
            return
        version = _header(scope, MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            data = UnsupportedProtocolVersionErrorData(supported=list(HANDSHAKE_PROTOCOL_VERSIONS), requested=version)
            message = "a turn spans several requests and needs an MCP session: initialize with a handshake version"
            await _jsonrpc_error(400, UNSUPPORTED_PROTOCOL_VERSION, message, data.model_dump(mode="json"))(
                scope, receive, send
            )
            return
        session_id = _header(scope, MCP_SESSION_ID_HEADER)
        if session_id is not None:
            caller = self.sessions.get(session_id)
            if caller is None or not hmac.compare_digest(caller.key_digest, _digest(key)):
                await _jsonrpc_error(404, INVALID_REQUEST, "Session not found")(scope, receive, send)
                return
            scope[SCOPE_KEY] = caller.state
            await self.manager.handle_request(scope, receive, send)
            return
        await self.open(key, scope, receive, send)

    async def open(self, key: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A request without a session: check the key with Engram, then let the SDK open the session
        and hold its state under the id the SDK gives it."""
        engram = AsyncEngram(self.defaults.url, key, http_client=self.http)
        state = EngramMcp(replace(self.defaults, api_key=key), engram)
        try:
            await state.verb_tools()
        except AuthenticationError:
            await _unauthorized("invalid_token", "Engram does not accept this API key")(scope, receive, send)
            return
        except PermissionDeniedError:
            # A valid key without the runtime scope (a management key): authenticated, not allowed.
            await _unauthorized("insufficient_scope", "this API key may not run turns", 403)(scope, receive, send)
            return
        except EngramError as error:
            await _jsonrpc_error(502, INTERNAL_ERROR, f"Engram could not be reached: {error.code}: {error.message}")(
                scope, receive, send
            )
            return
        scope[SCOPE_KEY] = state

        async def register(message: Message) -> None:
            # The session is held before its id reaches the client, so the client's next request finds it.
            if message["type"] == "http.response.start" and message["status"] < 400:
                headers = dict(message.get("headers", []))
                opened = headers.get(MCP_SESSION_ID_HEADER.encode("ascii"))
                if opened is not None:
                    self.sessions[opened.decode("latin-1")] = Caller(_digest(key), state)
            await send(message)

        await self.manager.handle_request(scope, receive, register)


async def serve_http(defaults: Config, host: str, port: int) -> None:
    import uvicorn

    async with httpx.AsyncClient(timeout=DEFAULT_TIMEOUT) as http:
        app = HttpGate(defaults, http, host=host).app()
        await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()
