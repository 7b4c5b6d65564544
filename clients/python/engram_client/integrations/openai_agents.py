"""Engram for the OpenAI Agents SDK (extra ``openai-agents``): the memory verbs and ``search_history``
as ``FunctionTool``s bound to one Engram turn, and ``run_turn``, which runs an agent through the turn
with ``Runner.run`` and delivers its final output as the reply.

    async with engram.turn(session, inbound.message_id) as turn:
        done = await run_turn(agent, turn, text, session=session)   # ClaimGuardFailed, ReplyWithheld
        print(done.text, done.reply.cited)

Each tool call is one round of the turn (calls the SDK runs together are run one after another), its
result ends with the committed ledger, and once no round is left every tool is disabled (``is_enabled``),
so the model is no longer offered them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, TResponseInputItem
from agents.tool_context import ToolContext

from engram_client.errors import ProtocolError
from engram_client.integrations._verbs import AsyncTurnVerbs, DeliveredTurn, VerbTool, refusal_text, turn_prompt
from engram_client.turn import AsyncTurnSession
from engram_client.types import Session


def _invoker(verbs: AsyncTurnVerbs, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            malformed = ProtocolError(f"{name}: the arguments are not a JSON object", code="invalid_tool_arguments")
            return refusal_text(malformed)
        return await verbs.call(name, parsed)

    return invoke


def _function_tool(verbs: AsyncTurnVerbs, tool: VerbTool) -> FunctionTool:
    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.parameters,
        on_invoke_tool=_invoker(verbs, tool.name),
        # The API's schemas use if/then and not, which strict mode refuses; the API validates every call.
        strict_json_schema=False,
        is_enabled=lambda context, agent: verbs.offered,
    )


async def engram_tools(turn: AsyncTurnSession | AsyncTurnVerbs) -> list[FunctionTool]:
    """The turn's tools as ``FunctionTool``s: the API's names, descriptions and JSON schemas, disabled
    once the turn has no round left."""
    verbs = turn if isinstance(turn, AsyncTurnVerbs) else AsyncTurnVerbs(turn)
    return [_function_tool(verbs, tool) for tool in await verbs.tools()]


async def run_turn(
    agent: Agent[Any],
    turn: AsyncTurnSession,
    user_text: str,
    *,
    session: Session | None = None,
    system: str = "",
    context: Any = None,
    max_turns: int = 10,
    run_config: RunConfig | None = None,
) -> DeliveredTurn[RunResult]:
    """Run ``agent`` (with the turn's tools added to its own) for one turn: the turn's instructions (the
    tools' rules, the session's snapshot) go in a system message, the user message carries the in-turn
    recall and the participants, and the final output is submitted as the reply, citing the ``[m:…]``
    ids in it (``ClaimGuardFailed`` / ``ReplyWithheld`` when it is not delivered)."""
    verbs = AsyncTurnVerbs(turn)
    tools = await engram_tools(verbs)
    prompt = turn_prompt(turn, user_text, system=system, session=session)
    messages: list[TResponseInputItem] = [
        {"role": "system", "content": prompt.instructions},
        {"role": "user", "content": prompt.user},
    ]
    bound = agent.clone(tools=[*agent.tools, *tools])
    result = await Runner.run(bound, messages, context=context, max_turns=max_turns, run_config=run_config)
    if not isinstance(result.final_output, str):
        raise ProtocolError("the agent's final output is not text: a reply is text", code="reply_not_text")
    reply = await verbs.reply(result.final_output)
    return DeliveredTurn(reply=reply, text=result.final_output.strip(), result=result)


__all__ = ["engram_tools", "run_turn"]
