"""A LangGraph agent with Engram as its memory: two turns of a conversation with Maya, each run through
``engram_client.integrations.langgraph.run_turn`` (the memory verbs as LangChain tools run by LangGraph's
ToolNode, the committed ledger in every tool result, the model's last message delivered through the
claim guard).

    pip install "./clients/python[langgraph]"
    python examples/langgraph_agent.py --url http://127.0.0.1:8000 --api-key egk_...

(``ENGRAM_URL`` and ``ENGRAM_API_KEY`` work too.) A scripted chat model plays the agent, so the run needs
no network beyond Engram; any LangChain chat model that supports ``bind_tools`` (``ChatOpenAI``,
``ChatAnthropic``, …) takes its place in ``run_turn``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from engram_client import Engram, MessageIn
from engram_client.integrations.langgraph import run_turn
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

USER_TURNS = ["Hi, I'm Maya. I live in Porto.", "Actually, I moved to Lisbon last month."]


def tool_results(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Every tool result the model has read this turn: the call's status and result (the first line)."""
    return [json.loads(m.text.split("\n\n", 1)[0]) for m in messages if isinstance(m, ToolMessage)]


def tool_call(name: str, arguments: dict[str, Any], n: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": arguments, "id": f"call_{n}", "type": "tool_call"}])


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script: ``script(messages, tool names)`` is its next message."""

    script: Callable[[list[BaseMessage], list[str]], AIMessage]

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
        names = [tool["function"]["name"] for tool in kwargs.get("tools", [])]
        return ChatResult(generations=[ChatGeneration(message=self.script(messages, names))])


def maya(messages: list[BaseMessage], tools: list[str]) -> AIMessage:
    """Maya's two turns: recall, then remember (a new fact) or amend (a correction), then the reply
    citing the memory that call wrote."""
    correction = "moved" in next(m.text for m in messages if isinstance(m, HumanMessage))
    done = tool_results(messages)
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
        return AIMessage(content=f"Updated: you live in Lisbon now [{written}].")
    return AIMessage(content=f"Nice to meet you, Maya. Noted: Porto [{written}].")


def converse(engram: Engram, model: BaseChatModel, run: str, out: Any = sys.stdout) -> list[int]:
    """Ingest Maya's messages as her connector would and run one turn for each; the reply ids."""
    thread = f"D-MAYA-{run}"
    session = None
    replies = []
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
        (inbound,) = engram.ingest([message])
        if session is None:
            session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
        print(f"Maya:  {text}", file=out)
        with engram.turn(session, inbound.message_id) as turn:
            done = run_turn(model, turn, text, session=session, system="You are Maya's assistant.")
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
    with Engram(args.url, args.api_key) as engram:
        replies = converse(engram, ScriptedChatModel(script=maya), run=str(int(time.time() * 1000)))
    print(f"{len(replies)} replies delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
