"""PydanticAI through Engram (engram_client.integrations.pydantic_ai) against a live server, the model
scripted with PydanticAI's own FunctionModel: the memory verbs are the agent's toolset, every tool call
is one round whose result ends with the committed ledger, the tools leave once no round is left, and
the agent's output is the reply, delivered through the claim guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram_client import AsyncEngram, ClaimGuardFailed, Ledger
from engram_client.integrations import DeliveredTurn
from engram_client.integrations._verbs import ONE_CALL_A_ROUND
from engram_client.integrations.pydantic_ai import run_turn
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from history.models import Message, Turn
from memory.models import MemoryEntry, MemoryOperation
from tests.clients.conftest import Workspace, run_async

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai_agent.py"
VERBS = {"remember", "recall", "amend", "forget", "request_memory_sharing", "search_history"}

Step = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def returns(messages: list[ModelMessage]) -> list[str]:
    """The tool results the model has read, oldest first."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def result_of(text: str) -> dict[str, Any]:
    """A tool result's first line: the call's status and result."""
    loaded: dict[str, Any] = json.loads(text.split("\n\n", 1)[0])
    return loaded


class Script:
    """A FunctionModel script: each model request takes the next step; what each step saw is kept."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.seen: list[tuple[list[ModelMessage], AgentInfo]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append((list(messages), info))
        return self.steps.pop(0)(messages, info)


def call(name: str, arguments: dict[str, Any]) -> Step:
    return lambda messages, info: ModelResponse(parts=[ToolCallPart(name, arguments)])


def say(text: Callable[[list[ModelMessage]], str]) -> Step:
    return lambda messages, info: ModelResponse(parts=[TextPart(text(messages))])


Outcome = DeliveredTurn[Any] | ClaimGuardFailed


def _turn(workspace: Workspace, text: str, script: Script, max_rounds: int | None = None) -> tuple[int, Outcome]:
    """Run one turn answering Alice's ``text`` in her DM; the turn's id and the outcome (or the error)."""
    turn_id = 0

    async def scenario() -> Outcome:
        nonlocal turn_id
        async with AsyncEngram(workspace.base_url, workspace.key) as engram:
            (inbound,) = await engram.ingest([workspace.message("D-ALICE", "U2", text)])
            session = await engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
            agent = Agent(FunctionModel(script), instructions="You are Alice's assistant.")
            try:
                async with engram.turn(session, inbound.message_id, max_rounds=max_rounds) as turn:
                    turn_id = turn.turn_id
                    return await run_turn(agent, turn, text, session=session)
            except ClaimGuardFailed as failed:
                return failed

    outcome = run_async(scenario())
    return turn_id, outcome


def test_a_whole_turn_recalls_remembers_and_delivers_a_reply_citing_the_ledger(workspace: Workspace) -> None:
    """recall, then remember (its result carries the ledger), then no tools are offered (two rounds
    allowed) and the text output is delivered, citing the memory the ledger lists."""
    lisbon = {"body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"}
    script = Script(
        call("recall", {"query": "where I live"}),
        call("remember", lisbon),
        say(lambda m: f"Noted: you live in Lisbon [{result_of(returns(m)[-1])['result']['id']}]."),
    )
    turn_id, done = _turn(workspace, "I moved to Lisbon last month.", script, max_rounds=2)

    assert not isinstance(done, ClaimGuardFailed)
    reply = done.reply
    (entry,) = MemoryEntry.objects.filter(agent=workspace.agent)
    written = result_of(returns(script.seen[2][0])[-1])["result"]["id"]
    assert reply.state == "delivered" and reply.cited == [written]
    # The first request offered the verbs with the API's schemas, the turn's instructions and the
    # participants; the last offered none (no round left) and had the committed ledger in front of it.
    first, last = script.seen[0][1], script.seen[2][1]
    assert {t.name for t in first.function_tools} == VERBS
    assert first.instructions and ONE_CALL_A_ROUND in first.instructions
    assert first.instructions.startswith("You are Alice's assistant.")
    assert last.function_tools == []
    with workspace.client() as engram:
        ledger: Ledger = engram.ledger(turn_id)
    assert [op.id for op in ledger.operations] == [written]
    assert returns(script.seen[2][0])[-1].endswith(ledger.instruction)
    assert "Rounds left: 0." in returns(script.seen[2][0])[-1]
    prompt = script.seen[0][0][0]
    assert isinstance(prompt, ModelRequest)
    (user,) = [part for part in prompt.parts if isinstance(part, UserPromptPart)]
    assert '"Alice"' in str(user.content) and str(user.content).endswith("I moved to Lisbon last month.")

    turn = Turn.objects.get(pk=turn_id)
    assert turn.state == "delivered"
    assert list(MemoryOperation.objects.filter(turn=turn).values_list("kind", flat=True)) == ["remember"]
    delivered = Message.objects.get(pk=reply.message_id)
    assert entry.current_revision_id in delivered.cited_revision_ids


def test_a_refused_call_is_handed_back_and_uses_no_round(workspace: Workspace) -> None:
    """A preference without a subject is refused (subject_required, nothing ran): the model reads the
    refusal as the tool's result, corrects the call, and the turn still has its rounds."""
    short = {"body": "Prefers short answers.", "belief_type": "preference"}
    script = Script(
        call("remember", short),
        call("remember", {**short, "subject": "speaker"}),
        say(lambda m: f"Noted [{result_of(returns(m)[-1])['result']['id']}]."),
    )
    turn_id, done = _turn(workspace, "Please keep answers short.", script)

    refused = result_of(returns(script.seen[1][0])[-1])
    assert refused["status"] == "refused" and refused["code"] == "subject_required"
    assert not isinstance(done, ClaimGuardFailed) and done.reply.state == "delivered"
    assert "Rounds left: 2." in returns(script.seen[2][0])[-1]
    assert Turn.objects.get(pk=turn_id).state == "delivered"


def test_a_reply_claiming_a_change_that_did_not_happen_ends_in_claim_guard_failed(workspace: Workspace) -> None:
    """The model only recalls, then says it updated the memory: run_turn raises ClaimGuardFailed and
    nothing is delivered."""
    script = Script(
        call("recall", {"query": "where I live"}),
        say(lambda m: "I've updated your home city to Lisbon."),
    )
    turn_id, failed = _turn(workspace, "I moved to Lisbon last month.", script)

    assert isinstance(failed, ClaimGuardFailed) and failed.code == "claim_guard_failed"
    assert failed.detail["claims"]
    turn = Turn.objects.get(pk=turn_id)
    assert turn.state == "failed"
    assert not Message.objects.filter(conversation_id=turn.session.conversation_id, direction="outbound").exists()


def test_the_example_runs_two_turns(workspace: Workspace) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_AI_MODEL"}
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
