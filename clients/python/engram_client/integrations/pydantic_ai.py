"""Engram for PydanticAI agents (extra ``pydantic-ai``): the memory verbs and ``search_history`` as a
PydanticAI toolset bound to one Engram turn, and ``run_turn``, which runs an agent through the turn and
delivers its output as the reply.

    async with engram.turn(session, inbound.message_id) as turn:
        done = await run_turn(agent, turn, text, session=session)   # ClaimGuardFailed, ReplyWithheld
        print(done.text, done.reply.cited)

Each tool call is one round of the turn (the tools are ``sequential``: PydanticAI runs them one at a
time), its result ends with the committed ledger, and once no round is left the toolset offers no tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import AgentRunResult, Tool
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from engram_client.errors import ProtocolError
from engram_client.integrations._verbs import AsyncTurnVerbs, DeliveredTurn, turn_prompt
from engram_client.turn import AsyncTurnSession
from engram_client.types import Session


def _invoker(verbs: AsyncTurnVerbs, name: str) -> Callable[..., Awaitable[str]]:
    async def invoke(**arguments: Any) -> str:
        return await verbs.call(name, arguments)

    return invoke


async def engram_toolset(turn: AsyncTurnSession | AsyncTurnVerbs) -> AbstractToolset[Any]:
    """The turn's tools as a toolset: the API's names, descriptions and JSON schemas (validated by the
    API, which answers a refusal the model can correct), none once the turn has no round left."""
    verbs = turn if isinstance(turn, AsyncTurnVerbs) else AsyncTurnVerbs(turn)
    tools: list[Tool[Any]] = [
        Tool.from_schema(
            _invoker(verbs, tool.name),
            name=tool.name,
            description=tool.description,
            json_schema=tool.parameters,
            sequential=True,
        )
        for tool in await verbs.tools()
    ]
    return FunctionToolset(tools, id="engram").filtered(lambda ctx, definition: verbs.offered)


async def run_turn(
    agent: AbstractAgent[Any, Any],
    turn: AsyncTurnSession,
    user_text: str,
    *,
    session: Session | None = None,
    system: str = "",
    deps: Any = None,
) -> DeliveredTurn[AgentRunResult[Any]]:
    """Run ``agent`` for one turn: the turn's instructions (the tools' rules, the session's snapshot)
    are added to the agent's own, the user prompt carries the in-turn recall and the participants, the
    toolset is the turn's, and the agent's text output is submitted as the reply, citing the ``[m:…]``
    ids in it (``ClaimGuardFailed`` / ``ReplyWithheld`` when it is not delivered)."""
    verbs = AsyncTurnVerbs(turn)
    toolset = await engram_toolset(verbs)
    prompt = turn_prompt(turn, user_text, system=system, session=session)
    result = await agent.run(prompt.user, instructions=prompt.instructions, toolsets=[toolset], deps=deps)
    if not isinstance(result.output, str):
        raise ProtocolError("the agent's output is not text: a reply is text", code="reply_not_text")
    reply = await verbs.reply(result.output)
    return DeliveredTurn(reply=reply, text=result.output.strip(), result=result)


__all__ = ["engram_toolset", "run_turn"]
