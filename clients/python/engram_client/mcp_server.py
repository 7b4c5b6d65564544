"""``engram-mcp``: Engram's memory verbs for MCP hosts (desktop assistants, IDE agents), on the official
``mcp`` SDK, over stdio or streamable HTTP.

How an MCP host maps onto Engram's turn protocol (docs/mcp.md says it at length):

- Over stdio one ``engram-mcp`` process speaks for one conversation, as one agent (its API key); over
  streamable HTTP each MCP session does, as the agent of the key its caller sends (``mcp_http``). Either
  a thread it feeds itself (``--thread`` and ``--user``: the host's user types, the model relays the message
  with ``begin_turn(message)``, and the server ingests it as that user's message), or an existing
  conversation a connector feeds (``--conversation-id``: ``begin_turn(message_id)``).
- An MCP session has at most one open turn at a time. ``begin_turn`` opens the Engram session on
  first use (its frozen snapshot is the ``engram://session/snapshot`` resource) and starts a turn
  through the client's turn helper; it returns the turn's participants (actor ids, external ids, who
  is speaking), whom ``remember`` and ``amend`` name as a memory's subject (``"speaker"`` or an
  external id); each verb tool call is then one round of that turn (parallel
  calls are run one after another, each its own round); ``reply(text)`` submits the final reply,
  which the claim guard and the pre-delivery recheck check before anything is delivered.
- The ledger is read after every round and its instruction is part of the tool result, so the model
  has the committed account before it writes the reply (the helper refuses a reply otherwise).
- Rounds are bounded by the turn: once none is left the verb tools leave the tool list (hosts are
  told the list changed) and a call to one answers the ``round_limit`` error without a request.
- Every failure is an MCP tool error (``isError``) whose text starts with the API's ``code`` and
  whose structured content carries ``code``, ``message``, ``detail`` and ``status``.

The verb tools' input schemas are the API's own (``GET /api/v1/tools``), generated from the schemas
the rounds endpoint validates with, so what the host's model sends is what the API accepts; which
is why this uses the SDK's low-level server rather than deriving schemas from Python signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram_client.client import AsyncEngram
from engram_client.errors import ClaimGuardFailed, EngramError, ReplyWithheld, TurnClosed
from engram_client.tools import participants_text
from engram_client.turn import AsyncTurnSession
from engram_client.types import CallResult, MessageIn, Session

VERBS = ("remember", "recall", "amend", "forget", "request_memory_sharing", "search_history")
SNAPSHOT_URI = "engram://session/snapshot"
NAME = "engram"

INSTRUCTIONS = (
    "Engram is your long-term memory for this conversation. For every message of the user: call "
    "begin_turn first (it returns what you remember that is relevant and the people in the conversation), "
    "use the memory tools if you need to (each call is one round; a turn has few rounds), then call reply "
    "with your final answer, citing the [m:…] ids you relied on. Tell the user only what reply delivered. "
    "Never claim a memory change that the tool results do not show as committed. "
    "Every fact about a person names its subject in remember (and amend, to re-attribute): "
    '"speaker" for the person whose message you are answering, or another participant\'s external id '
    "from begin_turn. Facts about the project, not about anyone, may stay without a subject."
)
#: Added to the API's own descriptions of the verbs that name people: where the model finds whom
#: it may name (begin_turn is this server's, so the API's text cannot say it).
SUBJECT_NOTE = (
    " The people you may name (subject, or recall's subjects) are the participants begin_turn listed: "
    '"speaker" for the one whose message you are answering, or another participant\'s external id.'
)
SUBJECT_VERBS = ("remember", "recall", "amend")


@dataclass(frozen=True)
class Config:
    """What one ``engram-mcp`` process speaks for."""

    url: str
    api_key: str
    conversation_id: int | None = None
    requester_actor_id: int | None = None
    connector: str = "mcp:local"
    thread: str | None = None
    user: str | None = None
    user_name: str | None = None
    thread_title: str = ""

    @property
    def feeds_thread(self) -> bool:
        """True when the server ingests the host user's messages into its own thread."""
        return self.conversation_id is None


def _error(code: str, message: str, detail: Any = None, status: int = 0) -> types.CallToolResult:
    body = {"code": code, "message": message, "detail": detail if detail is not None else {}, "status": status}
    text = f"{code}: {message}" + (f"\n{json.dumps(detail, ensure_ascii=False, sort_keys=True)}" if detail else "")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=body, is_error=True
    )


def _api_error(error: EngramError) -> types.CallToolResult:
    return _error(error.code, error.message, error.detail, error.status)


def _ok(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured, is_error=False
    )


def _call_text(result: CallResult) -> str:
    if result.status == "unchanged":
        return f"unchanged: {result.message or 'nothing was written'} (you must not say it happened)"
    return json.dumps(result.result, ensure_ascii=False, sort_keys=True)


@dataclass
class Conversation:
    """The state of one MCP session (over stdio, of the process): its Engram session and its one open turn."""

    session: Session | None = None
    turn: AsyncTurnSession | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def rounds_exhausted(self) -> bool:
        return self.turn is not None and self.turn.rounds_left <= 0


class EngramMcp:
    """The tools, the resource and the state behind them; :meth:`server` wires them to the SDK."""

    def __init__(self, config: Config, engram: AsyncEngram) -> None:
        self.config = config
        self.engram = engram
        self.conversation = Conversation()
        self._verb_tools: list[types.Tool] | None = None

    # -- tool list ---------------------------------------------------------------------------------

    async def verb_tools(self) -> list[types.Tool]:
        """The verbs and ``search_history`` with the API's own input schemas and descriptions (those of
        ``remember`` and ``amend`` say where the participants they may name are listed)."""
        if self._verb_tools is None:
            listing = await self.engram.tools("anthropic")
            self._verb_tools = [
                types.Tool(
                    name=t["name"],
                    description=t["description"] + (SUBJECT_NOTE if t["name"] in SUBJECT_VERBS else ""),
                    input_schema=t["input_schema"],
                )
                for t in listing.tools
            ]
        return self._verb_tools

    def begin_turn_tool(self) -> types.Tool:
        if self.config.feeds_thread:
            properties: dict[str, Any] = {
                "message": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 20_000,
                    "description": "The user's message, exactly as they wrote it.",
                }
            }
            required = ["message"]
        else:
            properties = {
                "message_id": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The Engram id of the inbound message to answer.",
                }
            }
            required = ["message_id"]
        return types.Tool(
            name="begin_turn",
            description=(
                "Start answering a new message of the user: call this first, once per user message. Returns "
                "the memories relevant to it (ids in brackets, [m:…]), the conversation's participants (whom "
                "a memory may name as its subject, and which of them is speaking), the id of the message "
                "being answered, and how many rounds of memory tool calls the turn has. Finish the turn "
                "with reply before beginning another."
            ),
            input_schema={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        )

    def reply_tool(self) -> types.Tool:
        return types.Tool(
            name="reply",
            description=(
                "Submit your final answer to the user's message and end the turn. Engram checks it before "
                "delivering it: a reply claiming a memory change that did not commit fails "
                "(claim_guard_failed), and a reply is withheld when the conversation's audience or a memory "
                "it used changed meanwhile (reply_withheld). Show the user only a delivered reply. "
                "cited_ids: the [m:…] memory ids your answer relies on."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 20_000, "description": "The reply."},
                    "cited_ids": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^\\[?m:[0-9a-f]{8,16}\\]?$"},
                        "maxItems": 100,
                        "description": "Memory ids the reply relies on, e.g. m:0000002a.",
                    },
                },
                "required": ["text"],
                "additionalProperties": False,
            },
        )

    async def list_tools(self) -> list[types.Tool]:
        """begin_turn and reply always; the verbs unless the open turn has no round left (spec 000,
        bounded tool rounds: after the last round the model is not offered them at all)."""
        verbs = [] if self.conversation.rounds_exhausted else await self.verb_tools()
        return [self.begin_turn_tool(), *verbs, self.reply_tool()]

    # -- tool calls --------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[types.CallToolResult, bool]:
        """The tool's result, and whether the tool list changed. One call at a time: concurrent calls
        become successive rounds of the turn, never interleaved halves of one."""
        async with self.conversation.lock:
            exhausted = self.conversation.rounds_exhausted
            try:
                if name == "begin_turn":
                    result = await self.begin_turn(arguments)
                elif name == "reply":
                    result = await self.reply(arguments)
                elif name in VERBS:
                    result = await self.verb(name, arguments)
                else:
                    result = _error("unknown_tool", f"no tool named {name!r}")
            except EngramError as error:
                result = _api_error(error)
            return result, exhausted != self.conversation.rounds_exhausted

    def _message(self, body: str) -> MessageIn:
        assert self.config.thread is not None and self.config.user is not None
        kind, _, name = self.config.connector.partition(":")
        return {
            "connector": {"type": kind, "name": name},
            "thread": {
                "external_id": self.config.thread,
                "title": self.config.thread_title,
                # The thread is private between the user and the agent: only the user reads it.
                "audience": {"kind": "members", "readers": [self.config.user]},
            },
            "actor": {"external_id": self.config.user, "display_name": self.config.user_name or self.config.user},
            "external_id": f"mcp-{uuid.uuid4().hex}",
            "body": body,
            "created_at": datetime.now(UTC).isoformat(),
            "evidence": {"method": "connector_api", "detail": {"via": "engram-mcp"}},
        }

    async def begin_turn(self, arguments: dict[str, Any]) -> types.CallToolResult:
        state = self.conversation
        if state.turn is not None:
            return _error(
                "turn_open",
                "a turn is open: finish it with reply before beginning another",
                {"turn_id": state.turn.turn_id},
                409,
            )
        requester: int | None
        if self.config.feeds_thread:
            message = arguments.get("message")
            if not isinstance(message, str) or not message.strip():
                return _error("invalid_request", "message: the user's message, a non-empty string", status=400)
            inbound = (await self.engram.ingest([self._message(message)]))[0]
            conversation_id, message_id, requester = inbound.conversation_id, inbound.message_id, inbound.actor_id
        else:
            given = arguments.get("message_id")
            if not isinstance(given, int) or isinstance(given, bool) or given < 1:
                return _error("invalid_request", "message_id: a positive integer", status=400)
            assert self.config.conversation_id is not None
            conversation_id, message_id = self.config.conversation_id, given
            requester = self.config.requester_actor_id
        opened = state.session is None
        if state.session is None:
            state.session = await self.engram.open_session(conversation_id, requester_actor_id=requester)
        turn = self.engram.turn(state.session, message_id)
        await turn.__aenter__()  # the turn stays open across tool calls until reply closes it
        state.turn = turn
        tools = await self.engram.tools("anthropic", turn_id=turn.turn_id)
        recall = turn.recall
        parts = [
            f"Turn {turn.turn_id} started, answering message {message_id}; "
            f"{turn.rounds_left} rounds of memory tool calls left."
        ]
        if opened and state.session.snapshot_block:
            parts.append("Memory snapshot of this session:\n" + state.session.snapshot_block)
        if recall is not None:
            parts.append("Relevant memory for this message:\n" + recall.block)
            parts.extend(recall.corrections)
        parts.append(participants_text(turn.participants))
        parts.append(tools.instructions)
        return _ok(
            "\n\n".join(p for p in parts if p),
            {
                "turn_id": turn.turn_id,
                "session_id": state.session.session_id,
                "message_id": message_id,
                "rounds_left": turn.rounds_left,
                "participants": [asdict(person) for person in turn.participants],
                "recall": recall.raw if recall is not None else None,
            },
        )

    async def verb(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        turn = self.conversation.turn
        if turn is None:
            return _error("no_turn", "no turn is open: call begin_turn with the user's message first", status=409)
        call = {**{k: v for k, v in arguments.items() if k != "verb"}, "verb": name}
        outcome = await turn.round([call])
        # Read the ledger now, so the model has the committed account in front of it before any reply.
        ledger = await turn.ledger()
        result = outcome.results[0]
        structured = {
            "round": outcome.round,
            "rounds_left": turn.rounds_left,
            "status": result.status,
            "code": result.code,
            "message": result.message,
            "result": result.result,
            "ledger": ledger.raw,
        }
        tail = f"\n\nRounds left: {turn.rounds_left}.\n{ledger.instruction}"
        if result.status == "error":
            error = _error(result.code or "error", result.message or "the call failed", structured, 422)
            error.content = [types.TextContent(type="text", text=f"{result.code}: {result.message}{tail}")]
            return error
        return _ok(_call_text(result) + tail, structured)

    async def reply(self, arguments: dict[str, Any]) -> types.CallToolResult:
        turn = self.conversation.turn
        if turn is None:
            return _error("no_turn", "no turn is open: call begin_turn with the user's message first", status=409)
        text, cited = arguments.get("text"), arguments.get("cited_ids", [])
        if not isinstance(text, str) or not text.strip():
            return _error("invalid_request", "text: the reply, a non-empty string", status=400)
        if not isinstance(cited, list) or not all(isinstance(c, str) for c in cited):
            return _error("invalid_request", "cited_ids: a list of memory ids", status=400)
        try:
            reply = await turn.reply(text, cited)
        except (ReplyWithheld, ClaimGuardFailed, TurnClosed):
            self.conversation.turn = None  # withheld or failed: the turn is over, the next may begin
            raise
        self.conversation.turn = None
        return _ok(
            "Delivered. Show the user exactly this reply.",
            {
                "state": reply.state,
                "message_id": reply.message_id,
                "cited": reply.cited,
                "ignored_citations": reply.ignored_citations,
            },
        )

    # -- the snapshot resource ---------------------------------------------------------------------

    def resources(self) -> list[types.Resource]:
        return [
            types.Resource(
                uri=SNAPSHOT_URI,
                name="session snapshot",
                description="The session's frozen memory snapshot (byte-stable for the session's life).",
                mime_type="text/plain",
            )
        ]

    async def read_snapshot(self) -> str:
        state = self.conversation
        if state.session is None and not self.config.feeds_thread:
            assert self.config.conversation_id is not None
            state.session = await self.engram.open_session(
                self.config.conversation_id, requester_actor_id=self.config.requester_actor_id
            )
        if state.session is None:
            raise MCPError(types.INVALID_PARAMS, "no session yet: the first begin_turn opens it")
        session = await self.engram.session(state.session.session_id)
        return session.snapshot_block

    # -- the SDK server ----------------------------------------------------------------------------

    def server(self) -> Server[Any]:
        """The SDK server for this one conversation state (stdio: the process is the session)."""
        return build_server(lambda ctx: self)


def build_server(state_of: Callable[[ServerRequestContext[Any]], EngramMcp]) -> Server[Any]:
    """The SDK server; ``state_of`` finds the :class:`EngramMcp` a request speaks to (over HTTP, the
    one of its MCP session, so handlers never reach another caller's turn)."""

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            return types.ListToolsResult(tools=await state_of(ctx).list_tools())
        except EngramError as error:
            raise MCPError(types.INTERNAL_ERROR, f"{error.code}: {error.message}", error.detail) from error

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        result, changed = await state_of(ctx).call_tool(params.name, dict(params.arguments or {}))
        if changed and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await ctx.session.send_tool_list_changed()
        return result

    async def on_list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=state_of(ctx).resources())

    async def on_read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if str(params.uri) != SNAPSHOT_URI:
            raise MCPError(types.INVALID_PARAMS, f"no resource {params.uri}")
        try:
            text = await state_of(ctx).read_snapshot()
        except EngramError as error:
            raise MCPError(types.INVALID_PARAMS, f"{error.code}: {error.message}", error.detail) from error
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=SNAPSHOT_URI, mime_type="text/plain", text=text)]
        )

    return Server(
        NAME,
        version="0.1.0",
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=on_list_resources,
        on_read_resource=on_read_resource,
    )


# --------------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------------


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


def parse_args(argv: Sequence[str] | None = None) -> tuple[Config, argparse.Namespace]:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="engram-mcp",
        description="Engram's memory verbs as an MCP server, for one conversation. Every flag has an "
        "environment variable (in brackets).",
    )
    parser.add_argument("--url", default=env("ENGRAM_URL"), help="Engram's base URL [ENGRAM_URL]")
    parser.add_argument(
        "--api-key",
        default=env("ENGRAM_API_KEY"),
        help="stdio: the agent's API key; streamable-http: unused, every caller sends its own as "
        "Authorization: Bearer [ENGRAM_API_KEY]",
    )
    parser.add_argument(
        "--conversation-id",
        type=int,
        default=_env_int("ENGRAM_CONVERSATION_ID"),
        help="speak in this existing conversation; begin_turn takes an inbound message id [ENGRAM_CONVERSATION_ID]",
    )
    parser.add_argument(
        "--requester-actor-id",
        type=int,
        default=_env_int("ENGRAM_REQUESTER_ACTOR_ID"),
        help="with --conversation-id: the person the session serves [ENGRAM_REQUESTER_ACTOR_ID]",
    )
    parser.add_argument(
        "--connector",
        default=env("ENGRAM_CONNECTOR", "mcp:local"),
        help="TYPE:NAME of the connector the host user's thread belongs to [ENGRAM_CONNECTOR]",
    )
    parser.add_argument("--thread", default=env("ENGRAM_THREAD"), help="the thread's external id [ENGRAM_THREAD]")
    parser.add_argument("--user", default=env("ENGRAM_USER"), help="the host user's external id [ENGRAM_USER]")
    parser.add_argument("--user-name", default=env("ENGRAM_USER_NAME"), help="their display name [ENGRAM_USER_NAME]")
    parser.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default=env("ENGRAM_MCP_TRANSPORT", "stdio"),
        help="[ENGRAM_MCP_TRANSPORT]",
    )
    parser.add_argument("--host", default=env("ENGRAM_MCP_HOST", "127.0.0.1"), help="HTTP only [ENGRAM_MCP_HOST]")
    parser.add_argument("--port", type=int, default=int(env("ENGRAM_MCP_PORT", "8765")), help="[ENGRAM_MCP_PORT]")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("Engram's URL is required (--url/ENGRAM_URL)")
    if args.transport == "streamable-http":
        # Every caller brings its own key (Authorization: Bearer); a key given here would be no one's.
        args.api_key = ""
    elif not args.api_key:
        parser.error("stdio speaks as the agent of one API key: --api-key/ENGRAM_API_KEY is required")
    if args.conversation_id is None and not (args.thread and args.user):
        parser.error(
            "say which conversation to speak for: --conversation-id, or --thread and --user "
            "(ENGRAM_CONVERSATION_ID, or ENGRAM_THREAD and ENGRAM_USER)"
        )
    kind, colon, name = args.connector.partition(":")
    if not (kind and colon and name):
        parser.error("--connector is TYPE:NAME, e.g. mcp:laptop")
    config = Config(
        url=args.url,
        api_key=args.api_key,
        conversation_id=args.conversation_id,
        requester_actor_id=args.requester_actor_id,
        connector=args.connector,
        thread=args.thread,
        user=args.user,
        user_name=args.user_name,
    )
    return config, args


async def serve(config: Config, args: argparse.Namespace) -> None:
    if args.transport == "streamable-http":
        from engram_client.mcp_http import serve_http

        await serve_http(config, args.host, args.port)
        return
    from mcp.server.stdio import stdio_server

    async with AsyncEngram(config.url, config.api_key) as engram:
        server = EngramMcp(config, engram).server()
        async with stdio_server() as (read_stream, write_stream):
            options = server.create_initialization_options(NotificationOptions(tools_changed=True))
            await server.run(read_stream, write_stream, options)


def main(argv: Sequence[str] | None = None) -> None:
    config, args = parse_args(argv)
    try:
        asyncio.run(serve(config, args))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
