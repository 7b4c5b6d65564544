"""``engram-mcp`` driven by the MCP SDK's own ``ClientSession`` over stdio (the command runs as a
subprocess, exactly as a desktop host starts it) and over streamable HTTP (the SDK's HTTP client, each
caller with its own API key), against a live Engram (pytest-django's live server, real PostgreSQL).
The verbs run inside turns, so the ledger, the claim guard and the round bound still hold; failures
are MCP tool errors carrying the API's code."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
import pytest
import uvicorn
from engram_client.mcp_http import HttpGate
from engram_client.mcp_server import INSTRUCTIONS, SUBJECT_NOTE, SUBJECT_VERBS, Config, parse_args
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents

from accounts.services import api_key_create
from history.models import Message, Turn
from memory.models import MemoryEntry, MemoryEvidence
from tests.clients.conftest import Workspace, run_async
from tests.factories import AgentFactory

T = TypeVar("T")
ENGRAM_MCP = str(Path(sys.executable).parent / "engram-mcp")
VERBS = {"remember", "recall", "amend", "forget", "request_memory_sharing", "search_history"}


@asynccontextmanager
async def mcp_session(workspace: Workspace, log: Path, **env: str) -> AsyncIterator[ClientSession]:
    """A host's connection to a fresh ``engram-mcp`` process."""
    config = {"ENGRAM_URL": workspace.base_url, "ENGRAM_API_KEY": workspace.key, **env}
    if "PYTHONPATH" in os.environ:  # the host's environment is not inherited; the client to run may be named there
        config["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(command=ENGRAM_MCP, env=config)
    with log.open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def desktop(workspace: Workspace, log: Path) -> Callable[[], Any]:
    """``engram-mcp`` speaking for Alice's private desktop thread."""
    return lambda: mcp_session(
        workspace, log, ENGRAM_THREAD="desktop-alice", ENGRAM_USER="U2", ENGRAM_USER_NAME="Alice"
    )


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return run_async(scenario())


def text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text(result)
    assert result.structured_content is not None
    return result.structured_content


def error_code(result: CallToolResult) -> str:
    assert result.is_error and result.structured_content is not None, text(result)
    code = result.structured_content["code"]
    assert text(result).startswith(f"{code}:")
    return str(code)


def test_the_tools_are_the_apis_verbs_with_its_schemas_and_a_turn_pair(workspace: Workspace, tmp_path: Path) -> None:
    """begin_turn, the five memory verbs, search_history and reply; each verb's input schema is the
    API's own, with no agent, audience or perspective parameter."""

    async def scenario() -> list[Any]:
        async with desktop(workspace, tmp_path / "mcp.log")() as mcp:
            return list((await mcp.list_tools()).tools)

    tools = {tool.name: tool for tool in run(scenario)}
    assert set(tools) == VERBS | {"begin_turn", "reply"}
    with workspace.client() as engram:
        api = {t["name"]: t for t in engram.tools("anthropic").tools}
    for name in VERBS:
        assert tools[name].input_schema == api[name]["input_schema"]
        assert not {"agent", "audience", "perspective"} & set(tools[name].input_schema["properties"])
        # The API's own description; remember, recall and amend also say where begin_turn lists whom to name.
        assert tools[name].description == api[name]["description"] + (SUBJECT_NOTE if name in SUBJECT_VERBS else "")
    assert {"subject", "subject_actor_id", "source_message_ids"} <= set(tools["remember"].input_schema["properties"])
    assert {"subject", "subject_actor_id"} <= set(tools["amend"].input_schema["properties"])
    assert {"subjects", "type_hints"} <= set(tools["recall"].input_schema["properties"])
    assert "participants" in (tools["begin_turn"].description or "")


def test_remembered_in_one_turn_recalled_in_a_later_one(workspace: Workspace, tmp_path: Path) -> None:
    """Turn 1 remembers and delivers a reply citing the new id; turn 2 recalls it. Each round's result
    carries the committed ledger; each reply is checked and stored as a delivered outbound message."""

    async def scenario() -> tuple[str, str, list[int]]:
        async with desktop(workspace, tmp_path / "mcp.log")() as mcp:
            first = ok(await mcp.call_tool("begin_turn", {"message": "I moved to Lisbon last month."}))
            assert first["rounds_left"] == 3
            remembered = await mcp.call_tool(
                "remember", {"body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"}
            )
            memory_id = ok(remembered)["result"]["id"]
            assert [op["operation"] for op in ok(remembered)["ledger"]["operations"]] == ["remember"]
            assert memory_id in text(remembered) and ok(remembered)["rounds_left"] == 2
            delivered = ok(
                await mcp.call_tool(
                    "reply", {"text": f"Noted: you live in Lisbon [{memory_id}].", "cited_ids": [memory_id]}
                )
            )
            assert delivered["state"] == "delivered" and delivered["cited"] == [memory_id]

            second = ok(await mcp.call_tool("begin_turn", {"message": "Where do I live again?"}))
            recalled = ok(await mcp.call_tool("recall", {"query": "home location Lisbon"}))
            assert memory_id in [item["id"] for item in recalled["result"]["items"]]
            assert recalled["ledger"]["operations"] == []
            answer = ok(await mcp.call_tool("reply", {"text": f"In Lisbon [{memory_id}]."}))
            return memory_id, answer["state"], [first["turn_id"], second["turn_id"]]

    memory_id, state, turn_ids = run(scenario)
    assert state == "delivered"
    turns = list(Turn.objects.filter(pk__in=turn_ids).order_by("pk"))
    assert [t.state for t in turns] == ["delivered", "delivered"] and turns[0].session_id == turns[1].session_id
    assert turns[0].inbound_message.body == "I moved to Lisbon last month."
    assert Message.objects.filter(conversation=turns[0].session.conversation, direction="outbound").count() == 2
    assert MemoryEntry.objects.count() == 1
    assert turns[1].reply is not None and memory_id in turns[1].reply.body


def test_failures_are_tool_errors_with_the_apis_code(workspace: Workspace, tmp_path: Path) -> None:
    """A verb before any turn (no_turn), a round the API refuses (400 invalid_request: nothing
    written), a call that changed nothing (unchanged, not an error and not in the ledger), and a reply
    claiming an uncommitted change (422 claim_guard_failed: the turn fails, the next one may begin)."""

    async def scenario() -> tuple[int, dict[str, Any]]:
        async with desktop(workspace, tmp_path / "mcp.log")() as mcp:
            assert error_code(await mcp.call_tool("recall", {"query": "x"})) == "no_turn"
            turn = ok(await mcp.call_tool("begin_turn", {"message": "Forget my address, please."}))
            assert error_code(await mcp.call_tool("begin_turn", {"message": "again"})) == "turn_open"
            refused = await mcp.call_tool("remember", {"body": "x", "confidence": "high"})
            assert error_code(refused) == "invalid_request"
            assert "confidence" in str(refused.structured_content["detail"])
            unchanged = ok(await mcp.call_tool("forget", {"id": "m:7fffffff"}))
            assert unchanged["status"] == "unchanged" and unchanged["ledger"]["operations"] == []
            claimed = await mcp.call_tool("reply", {"text": "I forgot your address."})
            assert error_code(claimed) == "claim_guard_failed"
            detail = claimed.structured_content["detail"]
            assert claimed.structured_content["status"] == 422
            ok(await mcp.call_tool("begin_turn", {"message": "Are you there?"}))
            return turn["turn_id"], detail

    turn_id, detail = run(scenario)
    assert detail["claims"] and "ledger" in detail
    assert Turn.objects.get(pk=turn_id).state == "failed"
    assert MemoryEntry.objects.count() == 0


def test_the_rounds_are_bounded_and_the_verbs_leave_the_tool_list(workspace: Workspace, tmp_path: Path) -> None:
    """Each verb call is one round; after the third the verbs are no longer listed, and a call to one
    answers round_limit without reaching the API; the reply still goes through."""

    async def scenario() -> tuple[int, set[str]]:
        async with desktop(workspace, tmp_path / "mcp.log")() as mcp:
            turn = ok(await mcp.call_tool("begin_turn", {"message": "What do you know about me?"}))
            left = [ok(await mcp.call_tool("recall", {"query": ""}))["rounds_left"] for _ in range(3)]
            assert left == [2, 1, 0]
            listed = {tool.name for tool in (await mcp.list_tools()).tools}
            assert error_code(await mcp.call_tool("search_history", {"query": "anything"})) == "round_limit"
            ok(await mcp.call_tool("reply", {"text": "Nothing yet."}))
            assert {tool.name for tool in (await mcp.list_tools()).tools} >= VERBS
            return turn["turn_id"], listed

    turn_id, listed = run(scenario)
    assert listed == {"begin_turn", "reply"}
    assert Turn.objects.get(pk=turn_id).rounds_used == 3


def test_the_session_snapshot_is_a_resource(workspace: Workspace, tmp_path: Path) -> None:
    """A memory remembered in one MCP session is in the next session's frozen snapshot, read as the
    engram://session/snapshot resource; before the first turn opens the session it is an error."""
    log = tmp_path / "mcp.log"

    async def scenario() -> tuple[str, str, list[str]]:
        async with desktop(workspace, log)() as mcp:
            ok(await mcp.call_tool("begin_turn", {"message": "I drink green tea every morning."}))
            tea = {"body": "Drinks green tea.", "belief_type": "preference", "subject": "speaker"}
            memory_id = ok(await mcp.call_tool("remember", tea))["result"]["id"]
            ok(await mcp.call_tool("reply", {"text": "Noted, green tea it is."}))
        async with desktop(workspace, log)() as mcp:
            assert [str(r.uri) for r in (await mcp.list_resources()).resources] == ["engram://session/snapshot"]
            with pytest.raises(MCPError):
                await mcp.read_resource("engram://session/snapshot")
            started = await mcp.call_tool("begin_turn", {"message": "Coffee or tea?"})
            contents = (await mcp.read_resource("engram://session/snapshot")).contents
            blocks = [c.text for c in contents if isinstance(c, TextResourceContents)]
            return memory_id, text(started), blocks

    memory_id, started, blocks = run(scenario)
    assert len(blocks) == 1 and memory_id in blocks[0] and "green tea" in blocks[0]
    assert blocks[0] in started  # the model is given the snapshot with the session's first turn


def test_an_existing_conversation_by_id(workspace: Workspace, tmp_path: Path) -> None:
    """With ENGRAM_CONVERSATION_ID the server answers messages a connector ingested: begin_turn takes
    the inbound message's id, and the snapshot resource is there from the start."""
    with workspace.client() as engram:
        inbound = engram.ingest([workspace.message("D-ALICE", "U2", "Which team owns the deploys?")])[0]

    async def scenario() -> tuple[str, str]:
        env = {
            "ENGRAM_CONVERSATION_ID": str(inbound.conversation_id),
            "ENGRAM_REQUESTER_ACTOR_ID": str(inbound.actor_id),
        }
        async with mcp_session(workspace, tmp_path / "mcp.log", **env) as mcp:
            tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            assert tools["begin_turn"].input_schema["required"] == ["message_id"]
            snapshot = (await mcp.read_resource("engram://session/snapshot")).contents
            assert error_code(await mcp.call_tool("begin_turn", {"message_id": 999_999})) == "message_not_found"
            ok(await mcp.call_tool("begin_turn", {"message_id": inbound.message_id}))
            ok(await mcp.call_tool("search_history", {"query": "deploys"}))
            reply = ok(await mcp.call_tool("reply", {"text": "I do not know yet."}))
            return str(type(snapshot[0]).__name__), reply["state"]

    kind, state = run(scenario)
    assert kind == "TextResourceContents" and state == "delivered"
    assert Turn.objects.get(inbound_message_id=inbound.message_id).state == "delivered"


def test_begin_turn_lists_the_participants_and_every_personal_memory_names_its_subject(
    workspace: Workspace, tmp_path: Path
) -> None:
    """In a channel where Victor and Alice spoke, begin_turn for Alice's message lists both with their
    actor ids, Alice speaking. A preference without a subject is refused (subject_required, naming the
    participants; no round used); "speaker" attributes it to Alice, Victor's external id to Victor, with
    the message it was learned from (found by search_history) as its source. A subject outside the
    participants and a source message not in front of the turn are refused with their codes; recall
    then names the memory's every source."""
    with workspace.client() as engram:
        victor_said, alice_asks, alice_again = engram.ingest(
            [
                workspace.message("C-GENERAL", "U1", "I manage the platform team now."),
                workspace.message("C-GENERAL", "U2", "I prefer morning standups. Who runs platform?"),
                workspace.message("C-GENERAL", "U2", "What do you know about the platform team?"),
            ]
        )
    env = {
        "ENGRAM_CONVERSATION_ID": str(alice_asks.conversation_id),
        "ENGRAM_REQUESTER_ACTOR_ID": str(alice_asks.actor_id),
    }

    async def scenario() -> dict[str, Any]:
        async with mcp_session(workspace, tmp_path / "mcp.log", **env) as mcp:
            assert mcp.instructions == INSTRUCTIONS
            started = await mcp.call_tool("begin_turn", {"message_id": alice_asks.message_id})
            people = {p["external_id"]: p for p in ok(started)["participants"]}
            assert people["U2"] == {
                "actor_id": alice_asks.actor_id,
                "external_id": "U2",
                "display_name": "Alice",
                "connector": "slack:acme",
                "speaking": True,
            }
            assert people["U1"]["actor_id"] == victor_said.actor_id and not people["U1"]["speaking"]
            assert 'speaking now (subject "speaker")' in text(started)
            assert f"answering message {alice_asks.message_id}" in text(started)

            standups = {"body": "Prefers morning standups.", "belief_type": "preference"}
            refused = await mcp.call_tool("remember", standups)
            assert error_code(refused) == "subject_required" and refused.structured_content is not None
            assert "U1" in json.dumps(refused.structured_content["detail"])
            found = ok(await mcp.call_tool("search_history", {"query": "manage platform team"}))
            assert victor_said.message_id in found["result"]["message_ids"] and found["rounds_left"] == 2
            manager = {
                "body": "Manages the platform team.",
                "belief_type": "user_model_attr",
                "subject": "U1",
                "source_message_ids": [victor_said.message_id],
            }
            ok(await mcp.call_tool("remember", manager))
            preference = ok(await mcp.call_tool("remember", {**standups, "subject": "speaker"}))
            ok(await mcp.call_tool("reply", {"text": "Noted. Victor runs platform."}))

            ok(await mcp.call_tool("begin_turn", {"message_id": alice_again.message_id}))
            stranger = await mcp.call_tool("remember", {**standups, "subject": "U999"})
            unseen = await mcp.call_tool("remember", {**manager, "source_message_ids": [alice_again.message_id + 1000]})
            about_victor = {"query": "platform team", "subjects": ["U1"], "type_hints": ["user_model_attr"]}
            recalled = ok(await mcp.call_tool("recall", about_victor))
            ok(await mcp.call_tool("reply", {"text": "Victor manages it."}))
            return {
                "stranger": error_code(stranger),
                "unseen": error_code(unseen),
                "preference": preference["result"]["id"],
                "items": recalled["result"]["items"],
            }

    outcome = run(scenario)
    assert outcome["stranger"] == "subject_not_participant"
    assert outcome["unseen"] == "unknown_source_message"
    subjects = dict(MemoryEntry.objects.values_list("current_revision__body", "current_revision__subject_id"))
    assert subjects == {
        "Manages the platform team.": victor_said.actor_id,
        "Prefers morning standups.": alice_asks.actor_id,
    }
    evidence = MemoryEvidence.objects.filter(revision__body="Manages the platform team.", kind="source_message")
    assert list(evidence.values_list("message_id", flat=True)) == [victor_said.message_id]
    # Recall passed its subjects and type hints through: only the user-model fact, ranked as about Victor.
    assert {i["belief_type"] for i in outcome["items"]} == {"user_model_attr"}
    (item,) = [i for i in outcome["items"] if i["statement"] == "Manages the platform team."]
    assert item["components"]["asked_subject"] == 1.0
    assert [s["actor_id"] for s in item["sources"]] == [victor_said.actor_id] and item["source"] == item["sources"][0]


def test_the_instructions_ask_for_a_subject_on_every_personal_fact() -> None:
    """What the host's model is told when it connects (the server's instructions, checked above to be
    what a host receives): name the subject of every fact about a person, "speaker" or a
    participant's external id; project facts may stay subject-less."""
    assert '"speaker"' in INSTRUCTIONS and "external id" in INSTRUCTIONS
    assert "project" in INSTRUCTIONS and "without a subject" in INSTRUCTIONS
    assert "begin_turn" in SUBJECT_NOTE and '"speaker"' in SUBJECT_NOTE


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextmanager
def http_server(workspace: Workspace, log: Path) -> Iterator[str]:
    """``engram-mcp --transport streamable-http`` as a subprocess with no API key of its own, for
    Alice's desktop thread; yields its endpoint once it answers HTTP (an early exit fails with its log)."""
    port = _free_port()
    env = {name: value for name, value in os.environ.items() if name != "ENGRAM_API_KEY"}
    env |= {"ENGRAM_URL": workspace.base_url, "ENGRAM_THREAD": "desktop-alice", "ENGRAM_USER": "U2"}
    url = f"http://127.0.0.1:{port}/mcp"
    with log.open("w") as out:
        server = subprocess.Popen(
            [ENGRAM_MCP, "--transport", "streamable-http", "--port", str(port)], env=env, stdout=out, stderr=out
        )
    try:
        while True:
            try:
                httpx.get(url, timeout=5)
                break
            except httpx.TransportError:
                try:
                    server.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    continue
                raise AssertionError(log.read_text()) from None
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    """A remote host's MCP session, every request carrying the caller's Engram key as its bearer."""
    async with (
        httpx2.AsyncClient(headers=bearer(key), timeout=httpx2.Timeout(30, read=300)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        yield mcp


def test_over_http_every_request_carries_the_callers_api_key(workspace: Workspace, tmp_path: Path) -> None:
    """Over streamable HTTP the server has no key of its own: a request without a bearer, or with a key
    Engram refuses, is a 401 with a Bearer challenge before any MCP handling (a management-only key: 403);
    with the agent's key a whole turn runs (begin_turn, remember, reply). A session's requests must carry
    the key that opened it: another (valid) key answers as an unknown session does. The sessionless
    2026-07-28 protocol is refused with the handshake versions to fall back to."""
    other = api_key_create(agent=AgentFactory.create()).secret
    manage = api_key_create(agent=workspace.agent, scopes=["manage"]).secret
    with http_server(workspace, tmp_path / "mcp.log") as url:
        missing = httpx.post(url, json=INITIALIZE, headers=ACCEPT, timeout=30)
        invalid = httpx.post(url, json=INITIALIZE, headers=ACCEPT | bearer("egk_not-a-key"), timeout=30)
        management = httpx.post(url, json=INITIALIZE, headers=ACCEPT | bearer(manage), timeout=30)
        modern = {"mcp-protocol-version": "2026-07-28"}
        sessionless = httpx.post(url, json=INITIALIZE, headers=ACCEPT | modern | bearer(workspace.key), timeout=30)
        opened = httpx.post(url, json=INITIALIZE, headers=ACCEPT | bearer(workspace.key), timeout=30)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stranger = httpx.post(url, json=listing, headers=ACCEPT | session | bearer(other), timeout=30)
        owner = httpx.post(url, json=listing, headers=ACCEPT | session | bearer(workspace.key), timeout=30)

        async def scenario() -> str:
            async with http_session(url, workspace.key) as mcp:
                assert {tool.name for tool in (await mcp.list_tools()).tools} >= VERBS | {"begin_turn", "reply"}
                ok(await mcp.call_tool("begin_turn", {"message": "I cycle to work."}))
                cycles = {"body": "Cycles to work.", "belief_type": "preference", "subject": "speaker"}
                ok(await mcp.call_tool("remember", cycles))
                return str(ok(await mcp.call_tool("reply", {"text": "Noted."}))["state"])

        assert run(scenario) == "delivered"

    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert invalid.status_code == 401 and 'error="invalid_token"' in invalid.headers["www-authenticate"]
    assert management.status_code == 403 and "mcp-session-id" not in management.headers
    # 2026-07-28 has no sessions to carry a turn: refused with the versions to fall back to.
    assert sessionless.status_code == 400 and sessionless.json()["error"]["code"] == -32022
    assert "2025-06-18" in sessionless.json()["error"]["data"]["supported"]
    assert opened.status_code == 200
    assert stranger.status_code == 404 and "tools" not in stranger.text
    assert owner.status_code == 200 and '"begin_turn"' in owner.text
    assert MemoryEntry.objects.get().agent_id == workspace.agent.pk


def test_over_http_each_mcp_session_is_its_own_engram_session(workspace: Workspace) -> None:
    """One server, three MCP sessions: two with the agent's key, one with another agent's. Each has its
    own turn (none answers turn_open while another's turn is open), another agent's session recalls
    only its own agent's memories, and a session's state is dropped when the host closes it."""
    second = AgentFactory.create()
    second_key = api_key_create(agent=second).secret
    port = _free_port()

    async def scenario() -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            gate = HttpGate(Config(url=workspace.base_url, api_key="", thread="desktop-alice", user="U2"), http)
            web = uvicorn.Server(uvicorn.Config(gate.app(), host="127.0.0.1", port=port, log_level="warning"))
            serving = asyncio.create_task(web.serve())
            try:
                async with asyncio.timeout(30):
                    while not web.started:
                        assert not serving.done(), "the server stopped before it started"
                        await asyncio.sleep(0.05)
                url = f"http://127.0.0.1:{port}/mcp"
                async with http_session(url, workspace.key) as alice, http_session(url, second_key) as other:
                    lisbon = ok(await alice.call_tool("begin_turn", {"message": "I moved to Lisbon."}))
                    fact = {"body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"}
                    memory_id = ok(await alice.call_tool("remember", fact))["result"]["id"]
                    theirs = ok(await other.call_tool("begin_turn", {"message": "Where do I live?"}))
                    recalled = ok(await other.call_tool("recall", {"query": "Lisbon home"}))["result"]["items"]
                    async with http_session(url, workspace.key) as again:
                        assert len(gate.sessions) == 3
                        parallel = ok(await again.call_tool("begin_turn", {"message": "And my commute?"}))
                        ok(await again.call_tool("reply", {"text": "I do not know yet."}))
                    ok(await alice.call_tool("reply", {"text": f"Noted [{memory_id}].", "cited_ids": [memory_id]}))
                    ok(await other.call_tool("reply", {"text": "I do not know."}))
                # The host's DELETE ends each session; its state goes with it.
                async with asyncio.timeout(30):
                    while gate.sessions:
                        await asyncio.sleep(0.05)
                return {
                    "turns": [lisbon["turn_id"], theirs["turn_id"], parallel["turn_id"]],
                    "sessions": [lisbon["session_id"], theirs["session_id"], parallel["session_id"]],
                    "recalled": [item["id"] for item in recalled],
                    "memory_id": memory_id,
                }
            finally:
                web.should_exit = True
                await serving

    outcome = run(scenario)
    assert len(set(outcome["turns"])) == 3 and len(set(outcome["sessions"])) == 3
    assert outcome["memory_id"] not in outcome["recalled"]
    turns = {turn.pk: turn for turn in Turn.objects.filter(pk__in=outcome["turns"]).select_related("session")}
    alices, theirs, parallel = (turns[pk] for pk in outcome["turns"])
    assert [t.state for t in (alices, theirs, parallel)] == ["delivered", "delivered", "delivered"]
    assert alices.session.conversation_id == parallel.session.conversation_id != theirs.session.conversation_id
    assert theirs.session.conversation.agent_id == second.pk
    assert MemoryEntry.objects.get().agent_id == workspace.agent.pk


def test_over_http_no_key_of_its_own_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """--api-key is for stdio; the HTTP server runs without one (and ignores one given), while stdio
    still refuses to start without it."""
    for name in [n for n in os.environ if n.startswith("ENGRAM_")]:
        monkeypatch.delenv(name)
    named = ["--url", "http://engram", "--thread", "t", "--user", "u"]
    config, args = parse_args([*named, "--transport", "streamable-http"])
    assert config.api_key == "" and args.transport == "streamable-http"
    assert parse_args([*named, "--transport", "streamable-http", "--api-key", "egk_x"])[0].api_key == ""
    with pytest.raises(SystemExit):
        parse_args(named)


def test_the_documented_remote_host_snippet_sends_the_key_as_a_bearer() -> None:
    """docs/mcp.md's configuration for a remote host points at the /mcp endpoint and sends the agent's
    API key in the Authorization header the HTTP server requires."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    snippet = json.loads(docs.split("```json\n")[2].split("```", 1)[0])
    engram = snippet["mcpServers"]["engram"]
    assert engram["url"].endswith("/mcp") and engram["headers"]["Authorization"].startswith("Bearer egk_")


def test_the_documented_desktop_snippet_configures_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/mcp.md's ``mcpServers`` block starts engram-mcp with a complete configuration: the
    environment it sets is all the command needs."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    snippet = json.loads(docs.split("```json\n", 1)[1].split("```", 1)[0])
    engram = snippet["mcpServers"]["engram"]
    assert Path(engram["command"]).name == "engram-mcp"
    for name in [n for n in os.environ if n.startswith("ENGRAM_")]:
        monkeypatch.delenv(name)
    for name, value in engram["env"].items():
        monkeypatch.setenv(name, value)
    config, args = parse_args([])
    assert (config.thread, config.user, config.connector) == ("desktop", "alice", "mcp:laptop")
    assert config.feeds_thread and args.transport == "stdio"
