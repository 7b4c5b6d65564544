"""The OpenAI Agents SDK through Engram (engram_client.integrations.openai_agents) against a live server,
the model a scripted implementation of the SDK's Model interface (no network): the memory verbs are
function tools, every tool call is one round whose output ends with the committed ledger, the tools are
disabled once no round is left, and the final output is the reply, delivered through the claim guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Tool, Usage
from engram_client import AsyncEngram, ClaimGuardFailed, Ledger
from engram_client.integrations import DeliveredTurn
from engram_client.integrations._verbs import ONE_CALL_A_ROUND
from engram_client.integrations.openai_agents import run_turn
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
)

from history.models import Message, Turn
from memory.models import MemoryEntry, MemoryOperation
from tests.clients.conftest import Workspace, run_async

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_agent.py"
VERBS = {"remember", "recall", "amend", "forget", "request_memory_sharing", "search_history"}

Step = Callable[[list[Any]], ResponseOutputItem]


def outputs(items: list[Any]) -> list[str]:
    """The tool outputs the model has read, oldest first."""
    return [str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def result_of(text: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(text.split("\n\n", 1)[0])
    return loaded


@dataclass
class Seen:
    system: str | None
    input: list[Any]
    tools: list[Tool]


@dataclass
class ScriptedModel(Model):
    """Each model request takes the next step; what each request saw is kept."""

    steps: list[Step]
    seen: list[Seen] = field(default_factory=list)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Tool],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.seen.append(Seen(system_instructions, items, list(tools)))
        return ModelResponse(output=[self.steps.pop(0)(items)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def call(name: str, arguments: dict[str, Any]) -> Step:
    return lambda items: ResponseFunctionToolCall(
        type="function_call", call_id=f"call_{len(items)}", name=name, arguments=json.dumps(arguments)
    )


def say(text: Callable[[list[Any]], str]) -> Step:
    return lambda items: ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text(items), annotations=[])],
    )


Outcome = DeliveredTurn[Any] | ClaimGuardFailed


def _turn(workspace: Workspace, text: str, model: ScriptedModel, max_rounds: int | None = None) -> tuple[int, Outcome]:
    """Run one turn answering Alice's ``text`` in her DM; the turn's id and the outcome (or the failure)."""
    turn_id = 0

    async def scenario() -> Outcome:
        nonlocal turn_id
        async with AsyncEngram(workspace.base_url, workspace.key) as engram:
            (inbound,) = await engram.ingest([workspace.message("D-ALICE", "U2", text)])
            session = await engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
            agent: Agent[Any] = Agent(name="assistant", instructions="You are Alice's assistant.", model=model)
            try:
                async with engram.turn(session, inbound.message_id, max_rounds=max_rounds) as turn:
                    turn_id = turn.turn_id
                    config = RunConfig(tracing_disabled=True)
                    return await run_turn(agent, turn, text, session=session, run_config=config)
            except ClaimGuardFailed as failed:
                return failed

    outcome = run_async(scenario())
    return turn_id, outcome


def test_a_whole_turn_recalls_remembers_and_delivers_a_reply_citing_the_ledger(workspace: Workspace) -> None:
    """recall, then remember (its output carries the ledger), then no tool is offered (two rounds
    allowed) and the final output is delivered, citing the memory the ledger lists."""
    lisbon = {"body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"}
    model = ScriptedModel(
        [
            call("recall", {"query": "where I live"}),
            call("remember", lisbon),
            say(lambda items: f"Noted: you live in Lisbon [{result_of(outputs(items)[-1])['result']['id']}]."),
        ]
    )
    turn_id, done = _turn(workspace, "I moved to Lisbon last month.", model, max_rounds=2)

    assert not isinstance(done, ClaimGuardFailed)
    last = model.seen[2]
    written = result_of(outputs(last.input)[-1])["result"]["id"]
    assert done.reply.state == "delivered" and done.reply.cited == [written]
    first = model.seen[0]
    assert {t.name for t in first.tools} == VERBS
    assert first.system == "You are Alice's assistant."
    system, user = first.input[0], first.input[1]
    assert system["role"] == "system" and ONE_CALL_A_ROUND in system["content"]
    assert user["role"] == "user" and '"Alice"' in user["content"]
    assert last.tools == []
    with workspace.client() as engram:
        ledger: Ledger = engram.ledger(turn_id)
    assert [op.id for op in ledger.operations] == [written]
    assert outputs(last.input)[-1].endswith(ledger.instruction)

    turn = Turn.objects.get(pk=turn_id)
    assert turn.state == "delivered"
    assert list(MemoryOperation.objects.filter(turn=turn).values_list("kind", flat=True)) == ["remember"]
    (entry,) = MemoryEntry.objects.filter(agent=workspace.agent)
    assert entry.current_revision_id in Message.objects.get(pk=done.reply.message_id).cited_revision_ids


def test_a_reply_claiming_a_change_that_did_not_happen_ends_in_claim_guard_failed(workspace: Workspace) -> None:
    """The model only recalls, then says it deleted the memory: run_turn raises ClaimGuardFailed and
    nothing is delivered."""
    model = ScriptedModel([call("recall", {"query": "address"}), say(lambda items: "I deleted your old address.")])
    turn_id, failed = _turn(workspace, "Please forget my old address.", model)

    assert isinstance(failed, ClaimGuardFailed) and failed.code == "claim_guard_failed"
    turn = Turn.objects.get(pk=turn_id)
    assert turn.state == "failed"
    assert not Message.objects.filter(conversation_id=turn.session.conversation_id, direction="outbound").exists()


def test_the_example_runs_two_turns(workspace: Workspace) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", workspace.base_url, "--api-key", workspace.key],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Noted: Porto [m:" in done.stdout and "you live in Lisbon now [m:" in done.stdout
    assert "2 replies delivered" in done.stdout
    kinds = MemoryOperation.objects.filter(turn__session__agent=workspace.agent).order_by("pk")
    assert list(kinds.values_list("kind", flat=True)) == ["remember", "amend"]
