"""A whole multi-turn conversation through Engram's Python client.

Maya talks to an agent in a direct message. Over four turns the agent recalls, searches the history,
remembers, amends a memory that became wrong, cites the memories it used as [m:…] ids, and replies;
each turn keeps to the protocol (bounded rounds, the committed ledger before the reply, the claim
guard and the pre-delivery recheck on the server). Every memory about Maya names her as its subject
("speaker": the author of the message being answered); the project fact found in an earlier message
has no subject, and names that message as its source (``source_message_ids``).

    python examples/agent_loop.py --url http://127.0.0.1:8000 --api-key eng_...

(``ENGRAM_URL`` and ``ENGRAM_API_KEY`` work too.) By default a deterministic scripted model plays the
agent, so the run needs no network beyond Engram and always goes the same way. With
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` set (and optionally ``OPENAI_MODEL``), any
OpenAI-compatible chat endpoint plays it instead, offered Engram's tool definitions for the turn.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from engram_client import Engram, MessageIn
from engram_client.agent import (
    ChatModel,
    Message,
    OpenAICompatibleModel,
    ScriptedModel,
    calls,
    recalled_items,
    run_turn,
    says,
    tool_results,
)

#: Messages of the conversation the runtime keeps in the prompt (the rest is for search_history).
WINDOW = 2
USER_TURNS = [
    "Hi, I'm Maya. I live in Porto, and I prefer short answers.",
    "When does the deploy freeze end? I mentioned it last week.",
    "Actually, I moved to Lisbon last month.",
    "Where do I live now, and how do I like my answers?",
]


def _written(messages: list[Message]) -> list[str]:
    """The ids of the memories written in this turn's rounds, in order."""
    return [r["result"]["id"] for r in tool_results(messages) if r["status"] == "ok" and "revision" in r["result"]]


def _item(messages: list[Message], word: str) -> dict[str, Any]:
    """The newest recalled memory whose statement mentions ``word``."""
    return next(i for i in reversed(recalled_items(messages)) if word.lower() in i["statement"].lower())


def _freeze_message(messages: list[Message]) -> dict[str, Any]:
    """The message found by search_history that says when the freeze ends."""
    for result in tool_results(messages):
        for hit in result.get("result", {}).get("hits", []):
            if "ends" in hit["message"]["body"]:
                return dict(hit["message"])
    raise LookupError("the search found no message about the end of the freeze")


def _freeze_end(messages: list[Message]) -> str:
    return str(_freeze_message(messages)["body"]).split("ends", 1)[1].strip(" .")


def scripted_model() -> ScriptedModel:
    """The agent's side of the four turns, step by step (a step is one model call)."""
    model = ScriptedModel()
    # 1. A new fact and a preference, both about the person speaking: check what is known first, then
    #    remember both with Maya as their subject.
    model.extend(
        [
            calls(("recall", {"query": "where I live, how I prefer answers"})),
            calls(
                ("remember", {"body": "Lives in Porto.", "belief_type": "user_model_attr", "subject": "speaker"}),
                ("remember", {"body": "Prefers short answers.", "belief_type": "preference", "subject": "speaker"}),
            ),
            says(lambda m: "Nice to meet you, Maya. Noted: Porto [{}], short answers [{}].".format(*_written(m))),
        ]
    )
    # 2. Something said earlier, outside the prompt's window: search the history, and keep the date as a
    #    project fact (about no one: no subject) learned from the message the search found.
    model.extend(
        [
            calls(("search_history", {"query": "deploy freeze ends", "actor": "requester"})),
            calls(
                (
                    "remember",
                    lambda m: {
                        "body": f"The deploy freeze ends {_freeze_end(m)}.",
                        "belief_type": "project_fact",
                        "source_message_ids": [_freeze_message(m)["message_id"]],
                    },
                )
            ),
            says(lambda m: f"The freeze ends {_freeze_end(m)} [{_written(m)[0]}]."),
        ]
    )
    # 3. A correction: recall to get the memory's id, then amend it (remember would add a second fact).
    model.extend(
        [
            calls(("recall", {"query": "where I live"})),
            calls(("amend", lambda m: {"id": _item(m, "Porto")["id"], "body": "Lives in Lisbon."})),
            says(lambda m: f"Updated: you live in Lisbon now [{_written(m)[0]}]."),
        ]
    )
    # 4. Both facts back, cited.
    model.extend(
        [
            calls(("recall", {"query": "where I live, how I prefer answers"})),
            says(lambda m: f"In Lisbon [{_item(m, 'Lisbon')['id']}]; short answers [{_item(m, 'short')['id']}]."),
        ]
    )
    return model


def choose_model() -> ChatModel:
    base_url, key = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY")
    if base_url and key:
        return OpenAICompatibleModel(base_url, key, model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    return scripted_model()


def converse(engram: Engram, model: ChatModel, *, run: str, out: Any = sys.stdout) -> list[int]:
    """Ingest Maya's messages as her connector would, and run one turn for each; the reply ids."""
    thread = f"D-MAYA-{run}"

    def message(n: int, body: str, when: datetime) -> MessageIn:
        return {
            "connector": {"type": "slack", "name": "example"},
            "thread": {"external_id": thread, "audience": {"kind": "members", "readers": ["U0MAYA"]}},
            "actor": {"external_id": "U0MAYA", "display_name": "Maya"},
            "external_id": f"{thread}-{n}",
            "body": body,
            "created_at": when.isoformat(),
            "evidence": {"method": "connector_signed"},
        }

    now = datetime.now(UTC)
    earlier = [
        "Heads-up for next week: there is a deploy freeze for the audit.",
        "The deploy freeze ends on Friday 12 December at noon.",
        "Thanks for the help with the dashboards!",
    ]
    history = engram.ingest(
        [message(i, body, now - timedelta(days=7, minutes=10 - i)) for i, body in enumerate(earlier)]
    )
    window = [m.message_id for m in history]
    session = None
    replies = []
    for n, text in enumerate(USER_TURNS, start=len(earlier)):
        (inbound,) = engram.ingest([message(n, text, datetime.now(UTC))])
        if session is None:
            session = engram.open_session(inbound.conversation_id, requester_actor_id=inbound.actor_id)
        print(f"Maya:  {text}", file=out)
        outcome = run_turn(engram, session, inbound.message_id, text, model, loaded_message_ids=window[-WINDOW:])
        verbs = ", ".join(r.verb for done in outcome.rounds for r in done.results) or "none"
        print(f"agent: {outcome.text}", file=out)
        print(f"       (tools: {verbs}; cited: {', '.join(outcome.reply.cited) or 'none'})", file=out)
        window += [inbound.message_id, outcome.reply.message_id]
        replies.append(outcome.reply.message_id)
    return replies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("ENGRAM_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("ENGRAM_API_KEY"))
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("an agent API key is needed: --api-key or ENGRAM_API_KEY")
    with Engram(args.url, args.api_key) as engram:
        replies = converse(engram, choose_model(), run=str(int(time.time() * 1000)))
    print(f"{len(replies)} replies delivered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
