"""Engram inside agent frameworks: the memory verbs and ``search_history`` as a framework's own tools,
bound to one Engram turn. Each module is an optional extra and imports its framework:

- ``engram_client.integrations.pydantic_ai`` (extra ``pydantic-ai``): a PydanticAI toolset;
- ``engram_client.integrations.openai_agents`` (extra ``openai-agents``): OpenAI Agents SDK function tools;
- ``engram_client.integrations.langgraph`` (extra ``langgraph``): LangChain tools and a LangGraph graph.

Every integration is a thin adapter over the client's turn helper (``engram.turn(...)``), which keeps
the protocol; none re-implements it. The mapping is the same in all three (docs/integrations.md):

- the tools' names, descriptions and JSON schemas are the API's own (``GET /api/v1/tools``), with no
  agent, audience or perspective parameter: those are bound from the API key and the turn;
- each tool call is one round of the turn with one call; calls a model makes together run one after
  another, never interleaved. After every round the committed ledger is read and its instruction is
  part of the tool's result, so the model has the authoritative account before it writes its reply;
- once the turn has no round left the tools are no longer offered to the model;
- the model's final text is submitted as the reply, citing the ``[m:…]`` ids it contains: the claim
  guard fails a reply asserting a change that did not commit (``ClaimGuardFailed``) and the
  pre-delivery recheck withholds one whose audience or memories changed (``ReplyWithheld``).
"""

from engram_client.integrations._verbs import (
    AsyncTurnVerbs,
    DeliveredTurn,
    TurnPrompt,
    TurnVerbs,
    VerbTool,
    turn_prompt,
)

__all__ = ["AsyncTurnVerbs", "DeliveredTurn", "TurnPrompt", "TurnVerbs", "VerbTool", "turn_prompt"]
