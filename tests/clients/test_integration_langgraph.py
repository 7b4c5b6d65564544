"""LangGraph through Engram (engram_client.integrations.langgraph) against a live server, the model a
scripted LangChain chat model that emits tool calls: the memory verbs are LangChain tools run by
LangGraph's ToolNode, every tool call is one round whose result ends with the committed ledger, the
tools are unbound once no round is left, and the graph's deliver node submits the last message through
the claim guard."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from engram_client import ClaimGuardFailed, Ledger
from engram_client.integrations import DeliveredTurn
from engram_client.integrations._verbs import ONE_CALL_A_ROUND
from engram_client.integrations.langgraph import run_turn
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from history.models import Message, Turn
from memory.models import MemoryEntry, MemoryOperation
from tests.clients.conftest import Workspace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_agent.py"
VERBS = {"remember", "recall", "amend", "forget", "request_memory_sharing", "search_history"}

Step = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """Each model call takes the next step; the messages and the tool names each call saw are kept."""

    steps: list[Step]
    seen: list[tuple[list[BaseMessage], list[str]]] = []  # pydantic copies the default per instance

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append((list(messages), [tool["function"]["name"] for tool in kwargs.get("tools", [])]))
        return ChatResult(generations=[ChatGeneration(message=self.steps.pop(0)(messages))])


def outputs(messages: list[BaseMessage]) -> list[str]:
    """The tool results the model has read, oldest first."""
    return [m.text for m in messages if isinstance(m, ToolMessage)]


def result_of(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(text.split("\n\n", 1)[0])
    return loaded


def call(name: str, arguments: dict[str, Any]) -> Step:
    return lambda messages: AIMessage(
        content="", tool_calls=[{"name": name, "args": arguments, "id": f"call_{len(messages)}", "type": "tool_call"}]
    )


def say(text: Callable[[list[BaseMessage]], str]) -> Step:
    return lambda messages: AIMessage(content=text(messages))


def _turn(
    workspace: Workspace, text: str, model: ScriptedChatModel, max_rounds: int | None = None
) -> tuple[int, DeliveredTurn[dict[str, Any]]]:
    """Run one turn answering Alice's ``text`` in her DM; the turn's id and the delivered turn."""
    with workspace.client() as engram:
        (inbound,) = engram.ingest([workspace.message("D-ALICE", "U2", text)])
        session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
        with engram.turn(session, inbound.message_id, max_rounds=max_rounds) as turn:
            return turn.turn_id, run_turn(model, turn, text, session=session)


def test_a_whole_turn_recalls_remembers_and_delivers_a_reply_citing_the_ledger(workspace: Workspace) -> None:
    """recall, then remember (its result carries the ledger), then the tools are unbound (two rounds
    allowed) and the deliver node delivers the last message, citing the memory the ledger lists."""
    lisbon = {"body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"}
    model = ScriptedChatModel(
        steps=[
            call("recall", {"query": "where I live"}),
            call("remember", lisbon),
            say(lambda m: f"Noted: you live in Lisbon [{result_of(outputs(m)[-1])['result']['id']}]."),
        ]
    )
    turn_id, done = _turn(workspace, "I moved to Lisbon last month.", model, max_rounds=2)

    (first, first_tools), (last, last_tools) = model.seen[0], model.seen[2]
    written = result_of(outputs(last)[-1])["result"]["id"]
    assert done.reply.state == "delivered" and done.reply.cited == [written]
    assert done.text == f"Noted: you live in Lisbon [{written}]."
    assert set(first_tools) == VERBS and last_tools == []
    system, user = first[0], first[1]
    assert isinstance(system, SystemMessage) and ONE_CALL_A_ROUND in system.text
    assert isinstance(user, HumanMessage) and '"Alice"' in user.text
    with workspace.client() as engram:
        ledger: Ledger = engram.ledger(turn_id)
    assert [op.id for op in ledger.operations] == [written]
    assert outputs(last)[-1].endswith(ledger.instruction)

    turn = Turn.objects.get(pk=turn_id)
    assert turn.state == "delivered"
    assert list(MemoryOperation.objects.filter(turn=turn).values_list("kind", flat=True)) == ["remember"]
    (entry,) = MemoryEntry.objects.filter(agent=workspace.agent)
    assert entry.current_revision_id in Message.objects.get(pk=done.reply.message_id).cited_revision_ids


def test_a_reply_claiming_a_change_that_did_not_happen_ends_in_claim_guard_failed(workspace: Workspace) -> None:
    """The model only recalls, then says it updated the memory: the graph's run raises ClaimGuardFailed
    and nothing is delivered."""
    model = ScriptedChatModel(
        steps=[call("recall", {"query": "where I live"}), say(lambda m: "I've updated your home city to Lisbon.")]
    )
    with pytest.raises(ClaimGuardFailed) as failed:
        _turn(workspace, "I moved to Lisbon last month.", model)

    assert failed.value.code == "claim_guard_failed" and failed.value.detail["claims"]
    (turn,) = Turn.objects.filter(session__agent=workspace.agent)
    assert turn.state == "failed"
    assert not Message.objects.filter(conversation_id=turn.session.conversation_id, direction="outbound").exists()


def test_the_example_runs_two_turns(workspace: Workspace) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", workspace.base_url, "--api-key", workspace.key],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Noted: Porto [m:" in done.stdout and "you live in Lisbon now [m:" in done.stdout
    assert "2 replies delivered" in done.stdout
    kinds = MemoryOperation.objects.filter(turn__session__agent=workspace.agent).order_by("pk")
    assert list(kinds.values_list("kind", flat=True)) == ["remember", "amend"]
