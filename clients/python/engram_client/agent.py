"""A minimal agent loop over the turn helper, for any chat model that speaks the OpenAI chat format.

``run_turn`` does what a runtime does in one turn: the snapshot and the tool instructions go in the
system prompt, the in-turn recall (and its correction lines) and the turn's participants (whom a
memory may name as its subject, and who is speaking) with the user's message; while the model
calls tools and a round is left, the calls run as a round and the committed ledger follows the
results; the model's text is the reply. Two models come with it: ``ScriptedModel`` (deterministic
steps, no network: tests and demos) and ``OpenAICompatibleModel`` (any ``/chat/completions``
endpoint, over httpx).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from engram_client.client import Engram
from engram_client.errors import ProtocolError, ValidationError
from engram_client.tools import participants_text, refused_messages, tool_messages
from engram_client.types import Ledger, Reply, Round, Session

#: An OpenAI chat message (``{"role": ..., "content": ..., "tool_calls": [...]}``).
Message = dict[str, Any]
CITATION = re.compile(r"\[(m:[0-9a-f]{8,16})\]")
#: Rounds the API may refuse in one turn (a refused round runs nothing and uses no round) before
#: ``run_turn`` gives up and raises the refusal: enough for a model to add a missing subject.
MAX_REFUSED_ROUNDS = 2


class ChatModel(Protocol):
    def chat(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        """The assistant's next message: text, or ``tool_calls`` (only when ``tools`` is not empty)."""
        ...


@dataclass
class TurnOutcome:
    reply: Reply
    text: str
    rounds: list[Round]
    ledger: Ledger | None
    messages: list[Message]


def run_turn(
    engram: Engram,
    session: Session,
    inbound_message_id: int,
    user_text: str,
    model: ChatModel,
    *,
    loaded_message_ids: Sequence[int] = (),
    system: str = "You are a helpful assistant with a long-term memory.",
) -> TurnOutcome:
    """One whole turn: rounds while the model calls tools, the ledger after each, then the reply. A
    round the API refuses is answered to the model with the refusal (at most ``MAX_REFUSED_ROUNDS``
    times a turn), since nothing ran and the round is still there to use."""
    with engram.turn(session, inbound_message_id, loaded_message_ids) as turn:
        turn.tools("openai")  # fetched once for the turn; also brings the instructions
        recall = turn.recall
        memory = recall.block if recall else ""
        corrections = "\n".join(recall.corrections) if recall else ""
        people = participants_text(turn.participants)
        messages: list[Message] = [
            {
                "role": "system",
                "content": "\n\n".join(p for p in (system, turn.tool_instructions, session.snapshot_block) if p),
            },
            {"role": "user", "content": "\n\n".join(p for p in (memory, corrections, people, user_text) if p)},
        ]
        ledger: Ledger | None = None
        refused = 0
        while True:
            tools = turn.tools("openai")
            answer = model.chat(messages, tools)
            calls = answer.get("tool_calls") or []
            if not calls or not tools:
                break
            messages.append({"role": "assistant", "content": answer.get("content"), "tool_calls": calls})
            try:
                done = turn.run_tool_calls(calls)
            except ValidationError as refusal:
                # Nothing ran: the model reads why (e.g. subject_required, which names the
                # participants) and may correct its calls.
                refused += 1
                if refused > MAX_REFUSED_ROUNDS:
                    raise
                messages.extend(refused_messages(calls, refusal))
                continue
            messages.extend(tool_messages(calls, done))
            ledger = turn.ledger()
            # The ledger is a developer-role instruction; sent as system, which every
            # OpenAI-compatible server accepts.
            messages.append({"role": "system", "content": ledger.instruction})
        text = str(answer.get("content") or "").strip()
        if not text:
            raise ProtocolError("the model wrote no reply", code="empty_reply")
        messages.append({"role": "assistant", "content": text})
        reply = turn.reply(text, cited_ids=CITATION.findall(text))
    return TurnOutcome(reply=reply, text=text, rounds=turn.rounds, ledger=ledger, messages=messages)


# --------------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------------

#: One scripted step: the messages so far -> the assistant's message.
Step = Callable[[list[Message]], Message]


@dataclass
class ScriptedModel:
    """A deterministic model: each ``chat`` answers with the next step. Steps come from :func:`calls`
    (tool calls, arguments given or computed from the messages) and :func:`says` (the reply text)."""

    steps: list[Step] = field(default_factory=list)
    calls_made: int = 0

    def extend(self, steps: Sequence[Step]) -> None:
        self.steps.extend(steps)

    def chat(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        if not self.steps:
            raise ProtocolError("the scripted model has no step left", code="script_exhausted")
        step = self.steps.pop(0)
        self.calls_made += 1
        answer = step(messages)
        if answer.get("tool_calls") and not tools:
            raise ProtocolError("the script calls a tool after the last round", code="script_out_of_rounds")
        return answer


Arguments = dict[str, Any] | Callable[[list[Message]], dict[str, Any]]


def calls(*requested: tuple[str, Arguments]) -> Step:
    """A step that calls tools: ``calls(("recall", {"query": "home"}), ("remember", lambda m: {...}))``."""

    def step(messages: list[Message]) -> Message:
        tool_calls = []
        for index, (name, arguments) in enumerate(requested):
            values = arguments(messages) if callable(arguments) else arguments
            ident = f"call_{len(messages)}_{index}"
            function = {"name": name, "arguments": json.dumps(values)}
            tool_calls.append({"id": ident, "type": "function", "function": function})
        return {"role": "assistant", "content": None, "tool_calls": tool_calls}

    return step


def says(text: str | Callable[[list[Message]], str]) -> Step:
    """A step that answers with text (computed from the messages when ``text`` is callable)."""
    return lambda messages: {"role": "assistant", "content": text(messages) if callable(text) else text}


def tool_results(messages: list[Message]) -> list[dict[str, Any]]:
    """Every tool result so far, newest last: ``{"status", "result", ...}`` as the model read them."""
    return [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]


def recalled_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Every memory item the model has seen in recall results so far."""
    items: list[dict[str, Any]] = []
    for result in tool_results(messages):
        items.extend(result.get("result", {}).get("items", []))
    return items


def memory_block_ids(messages: list[Message]) -> list[str]:
    """The ``m:…`` ids shown in the prompt (snapshot, in-turn recall, ledger and tool results)."""
    seen: list[str] = []
    for message in messages:
        for found in CITATION.findall(str(message.get("content") or "")):
            if found not in seen:
                seen.append(found)
    return seen


@dataclass
class OpenAICompatibleModel:
    """Any OpenAI-compatible ``/chat/completions`` endpoint (``base_url`` such as
    ``https://api.openai.com/v1``), with the tool definitions Engram gives for the turn."""

    base_url: str
    api_key: str
    model: str = "gpt-4o-mini"
    timeout: float = 60.0

    def chat(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        response = httpx.post(
            self.base_url.rstrip("/") + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=self.timeout,
        )
        response.raise_for_status()
        message: Message = response.json()["choices"][0]["message"]
        return message
