"""A PydanticAI agent with Engram as its memory: two turns of a conversation with Maya, each run through
``engram_client.integrations.pydantic_ai.run_turn`` (the memory verbs as the agent's toolset, the
committed ledger in every tool result, the output delivered through the claim guard).

    pip install "./clients/python[pydantic-ai]"
    python examples/pydantic_ai_agent.py --url http://127.0.0.1:8000 --api-key egk_...

(``ENGRAM_URL`` and ``ENGRAM_API_KEY`` work too.) By default PydanticAI's ``FunctionModel`` plays the
agent from a script, so the run needs no network beyond Engram. With ``PYDANTIC_AI_MODEL`` set (a model
name PydanticAI knows, such as ``openai:gpt-4o-mini``, with its provider's package and key), that model
plays it instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from engram_client import AsyncEngram, MessageIn
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

USER_TURNS = ["Hi, I'm Maya. I live in Porto.", "Actually, I moved to Lisbon last month."]


def tool_results(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """Every tool result the model has read this turn: the call's status and result (the first line)."""
    results = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    results.append(json.loads(str(part.content).split("\n\n", 1)[0]))
    return results


def user_prompt(messages: list[ModelMessage]) -> str:
    """The turn's user prompt: the in-turn recall, the participants and Maya's message."""
    first = messages[0]
    assert isinstance(first, ModelRequest)
    return next(str(p.content) for p in first.parts if isinstance(p, UserPromptPart))


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Maya's two turns: recall, then remember (a new fact) or amend (a correction), then the reply
    citing the memory that call wrote."""
    correction = "moved" in user_prompt(messages)
    done = tool_results(messages)
    if not done:
        return ModelResponse(parts=[ToolCallPart("recall", {"query": "where I live"})])
    if len(done) == 1 and not correction:
        about = {"body": "Lives in Porto.", "belief_type": "user_model_attr", "subject": "speaker"}
        return ModelResponse(parts=[ToolCallPart("remember", about)])
    if len(done) == 1:
        porto = next(i for i in done[0]["result"]["items"] if "Porto" in i["statement"])
        return ModelResponse(parts=[ToolCallPart("amend", {"id": porto["id"], "body": "Lives in Lisbon."})])
    written = done[-1]["result"]["id"]
    if correction:
        return ModelResponse(parts=[TextPart(f"Updated: you live in Lisbon now [{written}].")])
    return ModelResponse(parts=[TextPart(f"Nice to meet you, Maya. Noted: Porto [{written}].")])


def agent() -> Agent[None, str]:
    model = os.environ.get("PYDANTIC_AI_MODEL")
    return Agent(model or FunctionModel(scripted), instructions="You are Maya's assistant.")


async def converse(url: str, api_key: str, run: str, out: Any = sys.stdout) -> list[int]:
    """Ingest Maya's messages as her connector would and run one turn for each; the reply ids."""
    thread = f"D-MAYA-{run}"
    replies = []
    async with AsyncEngram(url, api_key) as engram:
        session = None
        for n, text in enumerate(USER_TURNS):
            message: MessageIn = {
                "connector": {"type": "slack", "name": "example"},
                "thread": {"external_id": thread, "audience": {"kind": "members", "readers": ["U0MAYA"]}},
                "actor": {"external_id": "U0MAYA", "display_name": "Maya"},
                "external_id": f"{thread}-{n}",
                "body": text,
                "created_at": datetime.now(UTC).isoformat(),
                "evidence": {"method": "connector_signed"},
            }
            (inbound,) = await engram.ingest([message])
            if session is None:
                session = await engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
            print(f"Maya:  {text}", file=out)
            async with engram.turn(session, inbound.message_id) as turn:
                done = await run_turn(agent(), turn, text, session=session)
            print(f"agent: {done.text}  (cited: {', '.join(done.reply.cited) or 'none'})", file=out)
            replies.append(done.reply.message_id)
    return replies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("ENGRAM_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("ENGRAM_API_KEY"))
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("an agent API key is needed: --api-key or ENGRAM_API_KEY")
    replies = asyncio.run(converse(args.url, args.api_key, run=str(int(time.time() * 1000))))
    print(f"{len(replies)} replies delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
