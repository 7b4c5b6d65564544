"""Engram for LangGraph (extra ``langgraph``): the memory verbs and ``search_history`` as LangChain tools
bound to one Engram turn, and a graph that runs a tool-calling chat model through the turn and delivers
its last message as the reply.

    with engram.turn(session, inbound.message_id) as turn:
        done = run_turn(model, turn, text, session=session)   # ClaimGuardFailed, ReplyWithheld
        print(done.text, done.reply.cited)

The graph is ``agent → tools → agent … → deliver``: ``agent`` calls the model with the tools bound
while a round is left and without them after, ``tools`` is LangGraph's ``ToolNode`` (each tool call is
one round, its result ends with the committed ledger; calls it runs together are run one after
another), and ``deliver`` submits the model's last message through the claim guard, so a reply that
is not delivered ends the graph's run with ``ClaimGuardFailed`` or ``ReplyWithheld``. It uses the sync
client (``Engram``); ``engram_tools`` alone fits a graph of your own (then submit the reply with
``turn.reply`` after reading ``turn.ledger()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode

from engram_client.errors import ProtocolError
from engram_client.integrations._verbs import DEFAULT_SYSTEM, DeliveredTurn, TurnVerbs, turn_prompt
from engram_client.turn import TurnSession
from engram_client.types import Session


def _invoker(verbs: TurnVerbs, name: str) -> Callable[..., str]:
    def invoke(**arguments: Any) -> str:
        return verbs.call(name, arguments)

    return invoke


def engram_tools(turn: TurnSession | TurnVerbs) -> list[BaseTool]:
    """The turn's tools as LangChain tools: the API's names, descriptions and JSON schemas (the API
    validates every call and answers a refusal the model can correct)."""
    verbs = turn if isinstance(turn, TurnVerbs) else TurnVerbs(turn)
    return [
        StructuredTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.parameters,
            func=_invoker(verbs, tool.name),
        )
        for tool in verbs.tools()
    ]


def engram_graph(model: BaseChatModel, turn: TurnSession | TurnVerbs) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The turn as a graph over ``MessagesState``: invoke it with the prompt's messages (``run_turn``
    does); it ends once the model's reply was delivered, or raises."""
    verbs = turn if isinstance(turn, TurnVerbs) else TurnVerbs(turn)
    tools = engram_tools(verbs)
    with_tools = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        # After the last round the model is not offered the tools at all.
        answer = (with_tools if verbs.offered else model).invoke(state["messages"])
        return {"messages": [answer]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "deliver"

    def deliver(state: MessagesState) -> dict[str, Any]:
        verbs.reply(state["messages"][-1].text)
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_node("deliver", deliver)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", "deliver"])
    graph.add_edge("tools", "agent")
    graph.add_edge("deliver", END)
    return graph.compile()


def run_turn(
    model: BaseChatModel,
    turn: TurnSession,
    user_text: str,
    *,
    session: Session | None = None,
    system: str = DEFAULT_SYSTEM,
    config: RunnableConfig | None = None,
) -> DeliveredTurn[dict[str, Any]]:
    """One turn through ``engram_graph``: a system message with ``system`` and the turn's instructions
    (the tools' rules, the session's snapshot), a user message with the in-turn recall, the participants
    and ``user_text``; the model's last message is the reply, citing the ``[m:…]`` ids in it
    (``ClaimGuardFailed`` / ``ReplyWithheld`` when it is not delivered)."""
    verbs = TurnVerbs(turn)
    graph = engram_graph(model, verbs)
    prompt = turn_prompt(turn, user_text, system=system, session=session)
    state = graph.invoke({"messages": [SystemMessage(prompt.instructions), HumanMessage(prompt.user)]}, config)
    if turn.delivered is None:
        raise ProtocolError("the graph ended without delivering a reply", code="no_reply")
    return DeliveredTurn(reply=turn.delivered, text=state["messages"][-1].text.strip(), result=state)


__all__ = ["engram_graph", "engram_tools", "run_turn"]
