"""What every framework integration shares: the turn's tools as plain definitions, one tool call run
as one round followed by the committed ledger, the prompt the turn gives the model, and the reply.

The protocol itself is the turn helper's (``TurnSession`` / ``AsyncTurnSession``): it refuses a round
when none is left and a reply until the ledger was read after the last round, and raises
``ClaimGuardFailed`` / ``ReplyWithheld`` when the reply is not delivered. This module only adapts it to
frameworks whose tools are called one at a time.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from engram_client.agent import CITATION
from engram_client.errors import EngramError, ProtocolError, RoundLimitReached, ValidationError
from engram_client.tools import participants_text, result_content
from engram_client.turn import AsyncTurnSession, TurnSession
from engram_client.types import Ledger, Reply, Round, Session, VerbCall

R = TypeVar("R")

#: Added to the API's tool instructions: a framework calls tools one by one, so each call is a round.
ONE_CALL_A_ROUND = (
    "Each memory tool call is a round of its own: calls you make together run one after another, each "
    "using a round. After every call its result ends with the committed ledger: never claim a memory "
    "change it does not list."
)
DEFAULT_SYSTEM = "You are a helpful assistant with a long-term memory."


@dataclass(frozen=True)
class VerbTool:
    """One tool as the API defines it: the verb's name, its description and its JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class TurnPrompt:
    """What the turn puts in front of the model: ``instructions`` for the system side (the caller's
    system prompt, the tools' rules about ids and rounds, the session's snapshot) and ``user`` for the
    user's message (the in-turn recall and its corrections, the participants, the user's text)."""

    instructions: str
    user: str


@dataclass(frozen=True)
class DeliveredTurn(Generic[R]):
    """A turn whose reply was delivered: the reply's provenance, its text and the framework's own result."""

    reply: Reply
    text: str
    result: R


def verb_tools(definitions: Sequence[Mapping[str, Any]]) -> list[VerbTool]:
    """The API's OpenAI-format definitions (``{"type": "function", "function": {...}}``) as ``VerbTool``s."""
    tools = []
    for definition in definitions:
        function = definition["function"]
        tools.append(VerbTool(function["name"], function.get("description", ""), dict(function["parameters"])))
    return tools


def turn_prompt(
    turn: TurnSession | AsyncTurnSession,
    user_text: str,
    *,
    system: str = "",
    session: Session | None = None,
) -> TurnPrompt:
    """The prompt of the turn, once its tools were fetched (they bring the instructions)."""
    recall = turn.recall
    instructions = [system, turn.tool_instructions, ONE_CALL_A_ROUND if turn.tool_instructions else ""]
    if session is not None and session.snapshot_block:
        instructions.append(session.snapshot_block)
    user = [
        recall.block if recall else "",
        "\n".join(recall.corrections) if recall else "",
        participants_text(turn.participants),
        user_text,
    ]
    return TurnPrompt("\n\n".join(p for p in instructions if p), "\n\n".join(p for p in user if p))


def verb_call(name: str, arguments: Mapping[str, Any]) -> VerbCall:
    """The tool's name is the verb; a ``verb`` among the arguments cannot override it."""
    return {**{k: v for k, v in arguments.items() if k != "verb"}, "verb": name}


def round_text(done: Round, rounds_left: int, ledger: Ledger) -> str:
    """A one-call round as the model reads it: the call's status and result, the rounds left, then the
    committed ledger's instruction."""
    return f"{result_content(done.results[0])}\n\nRounds left: {rounds_left}.\n{ledger.instruction}"


def refusal_text(error: EngramError) -> str:
    """A call the API (or the helper) refused before anything ran: no round was used, and the model
    reads why (``subject_required`` names the participants) so that it can correct the call."""
    body = {"status": "refused", "code": error.code, "message": error.message, "detail": error.detail}
    return json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)


def reply_body(text: str) -> tuple[str, list[str]]:
    """The reply to submit and the ``m:…`` ids it cites in brackets."""
    body = text.strip()
    if not body:
        raise ProtocolError("the model wrote no reply", code="empty_reply")
    return body, CITATION.findall(body)


class TurnVerbs:
    """A sync turn's verbs for a framework: ``tools()``, ``call(name, arguments)`` and ``reply(text)``.
    Calls are serialised (frameworks run a response's tool calls on threads): one round at a time."""

    def __init__(self, turn: TurnSession) -> None:
        self.turn = turn
        self._lock = threading.Lock()
        self._tools: list[VerbTool] | None = None

    @property
    def offered(self) -> bool:
        """Whether the model may still be offered the tools: a round is left and no reply was made."""
        return self.turn.rounds_left > 0 and self.turn.delivered is None

    def tools(self) -> list[VerbTool]:
        """The turn's tools, fetched once (with the instructions ``turn_prompt`` uses)."""
        if self._tools is None:
            self._tools = verb_tools(self.turn.tools("openai"))
        return list(self._tools)

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call as one round, read the ledger, and return what the model reads."""
        with self._lock:
            try:
                done = self.turn.round([verb_call(name, arguments)])
            except (ValidationError, RoundLimitReached) as refusal:
                return refusal_text(refusal)
            return round_text(done, self.turn.rounds_left, self.turn.ledger())

    def reply(self, text: str) -> Reply:
        """Submit the model's text as the reply; ``ClaimGuardFailed`` or ``ReplyWithheld`` when it is not
        delivered."""
        body, cited = reply_body(text)
        return self.turn.reply(body, cited)


class AsyncTurnVerbs:
    """``TurnVerbs`` for an ``AsyncTurnSession``."""

    def __init__(self, turn: AsyncTurnSession) -> None:
        self.turn = turn
        self._lock = asyncio.Lock()
        self._tools: list[VerbTool] | None = None

    @property
    def offered(self) -> bool:
        return self.turn.rounds_left > 0 and self.turn.delivered is None

    async def tools(self) -> list[VerbTool]:
        if self._tools is None:
            self._tools = verb_tools(await self.turn.tools("openai"))
        return list(self._tools)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        async with self._lock:
            try:
                done = await self.turn.round([verb_call(name, arguments)])
            except (ValidationError, RoundLimitReached) as refusal:
                return refusal_text(refusal)
            return round_text(done, self.turn.rounds_left, await self.turn.ledger())

    async def reply(self, text: str) -> Reply:
        body, cited = reply_body(text)
        return await self.turn.reply(body, cited)
