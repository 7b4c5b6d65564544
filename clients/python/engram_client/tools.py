"""Between a model's function calls and Engram's rounds: tool calls (OpenAI ``tool_calls`` or
Anthropic ``tool_use`` blocks) to verb calls, a round's results back to tool messages, and the turn's
participants as the text that tells a model whom a memory may name as its subject.

The tool definitions themselves come from the server (``Engram.tools``), generated from the very
schemas the rounds endpoint validates with; none has an agent, audience or perspective parameter.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engram_client.errors import EngramError, ProtocolError
from engram_client.types import SPEAKER, CallResult, Participant, Round, ToolFormat, VerbCall

#: What a model is told about naming a memory's subject (with the turn's participants).
ATTRIBUTION = (
    "Every memory about a person names its subject (remember's and amend's subject argument): "
    f'"{SPEAKER}" for the person whose message you are answering, or another participant\'s external id. '
    "Only facts about the project, not about anyone, may go without a subject. source_message_ids: the "
    "messages the memory was learned from, when not the one you are answering."
)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def participants_text(participants: Sequence[Participant]) -> str:
    """The turn's participants as a model reads them: who is speaking, and the subject to name for
    each. Names are quoted: a display name is what a person chose, not an instruction."""
    if not participants:
        return ""
    lines = ["People in this conversation. " + ATTRIBUTION]
    for person in participants:
        line = (
            f"- {json.dumps(person.display_name, ensure_ascii=False)}: external id "
            f"{json.dumps(person.external_id, ensure_ascii=False)}, actor id {person.actor_id}, "
            f"on {person.connector}"
        )
        lines.append(line + (f'; speaking now (subject "{SPEAKER}")' if person.speaking else ""))
    return "\n".join(lines)


def tool_call_parts(item: Any, format: ToolFormat) -> tuple[str, str, dict[str, Any]]:
    """``(call id, tool name, arguments)`` of one tool call, from a dict or an SDK object."""
    if format == "openai":
        function = _field(item, "function")
        name, arguments = _field(function, "name"), _field(function, "arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as error:
                raise ProtocolError(
                    f"tool call {name!r}: its arguments are not JSON", code="invalid_tool_arguments"
                ) from error
    elif format == "anthropic":
        name, arguments = _field(item, "name"), _field(item, "input")
    else:
        raise ValueError(f"unknown tool format {format!r}")
    if not isinstance(name, str) or not isinstance(arguments, dict):
        raise ProtocolError("a tool call needs a name and an object of arguments", code="invalid_tool_arguments")
    return str(_field(item, "id") or ""), name, arguments


def tool_calls_to_verb_calls(tool_calls: Sequence[Any], format: ToolFormat = "openai") -> list[VerbCall]:
    """The round a model's tool calls ask for: each call's name is the verb, its arguments the rest.
    A ``verb`` key among the arguments cannot override the tool's name."""
    calls = []
    for item in tool_calls:
        _, name, arguments = tool_call_parts(item, format)
        calls.append({**{k: v for k, v in arguments.items() if k != "verb"}, "verb": name})
    return calls


def result_content(result: CallResult) -> str:
    """A call's result as the text a model reads: its status, and the result or the error."""
    body: dict[str, Any] = {"status": result.status}
    if result.code:
        body["code"] = result.code
    if result.message:
        body["message"] = result.message
    body["result"] = result.result
    return json.dumps(body, ensure_ascii=False, sort_keys=True)


def tool_messages(tool_calls: Sequence[Any], round: Round, format: ToolFormat = "openai") -> list[dict[str, Any]]:
    """The round's results as the model's format answers its tool calls: OpenAI ``role: tool`` messages,
    or the Anthropic ``tool_result`` blocks of one user message (returned as a one-message list)."""
    if len(tool_calls) != len(round.results):
        raise ProtocolError("the round's results do not match the tool calls", code="results_mismatch")
    pairs = [(tool_call_parts(call, format)[0], result) for call, result in zip(tool_calls, round.results, strict=True)]
    if format == "openai":
        return [{"role": "tool", "tool_call_id": ident, "content": result_content(r)} for ident, r in pairs]
    blocks = [
        {"type": "tool_result", "tool_use_id": ident, "content": result_content(r), "is_error": r.status == "error"}
        for ident, r in pairs
    ]
    return [{"role": "user", "content": blocks}]


def refused_messages(
    tool_calls: Sequence[Any], error: EngramError, format: ToolFormat = "openai"
) -> list[dict[str, Any]]:
    """A round the API refused (a ``4xx``: nothing ran, no round was used) answered to each of the
    model's tool calls, with the API's code, message and detail, so the model can correct the calls
    (``subject_required`` names the participants) and try again."""
    content = json.dumps(
        {"status": "refused", "code": error.code, "message": error.message, "detail": error.detail},
        ensure_ascii=False,
        sort_keys=True,
    )
    idents = [tool_call_parts(call, format)[0] for call in tool_calls]
    if format == "openai":
        return [{"role": "tool", "tool_call_id": ident, "content": content} for ident in idents]
    blocks = [{"type": "tool_result", "tool_use_id": ident, "content": content, "is_error": True} for ident in idents]
    return [{"role": "user", "content": blocks}]
