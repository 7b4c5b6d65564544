"""An OpenAI Agents SDK agent with Engram as its memory: two turns of a conversation with Maya, each run
through ``engram_client.integrations.openai_agents.run_turn`` (the memory verbs as the agent's function
tools, the committed ledger in every tool result, the final output delivered through the claim guard).

    pip install "./clients/python[openai-agents]"
    python examples/openai_agents_agent.py --url http://127.0.0.1:8000 --api-key egk_...

(``ENGRAM_URL`` and ``ENGRAM_API_KEY`` work too.) By default a scripted ``Model`` plays the agent, so
the run needs no network beyond Engram. With ``OPENAI_API_KEY`` set (and optionally ``OPENAI_MODEL``),
the SDK's OpenAI model plays it instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Usage
from engram_client import AsyncEngram, MessageIn
from engram_client.integrations.openai_agents import run_turn
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

USER_TURNS = ["Hi, I'm Maya. I live in Porto.", "Actually, I moved to Lisbon last month."]


def tool_results(items: str | list[Any]) -> list[dict[str, Any]]:
    """Every tool result the model has read this turn: the call's status and result (the first line)."""
    outputs = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return [json.loads(str(output).split("\n\n", 1)[0]) for output in outputs]


def user_prompt(items: str | list[Any]) -> str:
    return next(str(i["content"]) for i in items if isinstance(i, dict) and i.get("role") == "user")


def tool_call(name: str, arguments: dict[str, Any], n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=f"call_{n}", name=name, arguments=json.dumps(arguments)
    )


def text(body: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=body, annotations=[])],
    )


class ScriptedModel(Model):
    """Maya's two turns: recall, then remember (a new fact) or amend (a correction), then the reply
    citing the memory that call wrote."""

    def next_output(self, items: str | list[Any]) -> ResponseFunctionToolCall | ResponseOutputMessage:
        correction = "moved" in user_prompt(items)
        done = tool_results(items)
        if not done:
            return tool_call("recall", {"query": "where I live"}, 0)
        if len(done) == 1 and not correction:
            return tool_call(
                "remember", {"body": "Lives in Porto.", "belief_type": "user_model_attr", "subject": "speaker"}, 1
            )
        if len(done) == 1:
            porto = next(i for i in done[0]["result"]["items"] if "Porto" in i["statement"])
            return tool_call("amend", {"id": porto["id"], "body": "Lives in Lisbon."}, 1)
        written = done[-1]["result"]["id"]
        if correction:
            return text(f"Updated: you live in Lisbon now [{written}].")
        return text(f"Nice to meet you, Maya. Noted: Porto [{written}].")

    async def get_response(
        self, system_instructions: str | None, input: str | list[Any], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        return ModelResponse(output=[self.next_output(input)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def agent() -> tuple[Agent[Any], RunConfig]:
    if os.environ.get("OPENAI_API_KEY"):
        model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        return Agent(name="assistant", instructions="You are Maya's assistant.", model=model), RunConfig()
    scripted = Agent(name="assistant", instructions="You are Maya's assistant.", model=ScriptedModel())
    return scripted, RunConfig(tracing_disabled=True)


async def converse(url: str, api_key: str, run: str, out: Any = sys.stdout) -> list[int]:
    """Ingest Maya's messages as her connector would and run one turn for each; the reply ids."""
    thread = f"D-MAYA-{run}"
    replies = []
    async with AsyncEngram(url, api_key) as engram:
        session = None
        for n, text_in in enumerate(USER_TURNS):
            message: MessageIn = {
                "connector": {"type": "slack", "name": "example"},
                "thread": {"external_id": thread, "audience": {"kind": "members", "readers": ["U0MAYA"]}},
                "actor": {"external_id": "U0MAYA", "display_name": "Maya"},
                "external_id": f"{thread}-{n}",
                "body": text_in,
                "created_at": datetime.now(UTC).isoformat(),
                "evidence": {"method": "connector_signed"},
            }
            (inbound,) = await engram.ingest([message])
            if session is None:
                session = await engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
            print(f"Maya:  {text_in}", file=out)
            assistant, run_config = agent()
            async with engram.turn(session, inbound.message_id) as turn:
                done = await run_turn(assistant, turn, text_in, session=session, run_config=run_config)
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
