"""A few real turns in the demo workspace, so the end-user view ("what did the agent know?") has
something to show on first run: Priya and Sam ask the demo agent things in their direct messages, and a
scripted agent answers through the agent API with the Python client, exactly as a runtime would
(ingest, session, turn, rounds, ledger, reply). One of Priya's turns leaves a memory worth
correcting: the agent over-generalises Sam's one Friday off into "does not work on Fridays".

The requests go through Django's whole stack (middleware, authentication, DRF) in this process, over
httpx's WSGI transport, so no server needs to be running while the demo loads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from django.conf import settings
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from engram_client import Engram
from engram_client.agent import Message, ScriptedModel, Step, calls, recalled_items, run_turn, says, tool_results

from accounts.models import Actor, RuntimeAgent
from accounts.services import api_key_create, api_key_revoke
from history.models import Conversation
from history.models import Message as StoredMessage

#: Messages of its conversation the runtime loads into the prompt with each turn.
WINDOW = 3


@dataclass(frozen=True)
class DemoTurn:
    thread: str
    actor: str  # external id
    when: datetime
    text: str
    steps: tuple[Step, ...]


def _item_id(messages: list[Message], word: str) -> str:
    """The id of the newest recalled memory whose statement mentions ``word``."""
    for item in reversed(recalled_items(messages)):
        if word.lower() in str(item["statement"]).lower():
            return str(item["id"])
    raise LookupError(f"no recalled memory mentions {word!r}")


def _written_id(messages: list[Message]) -> str:
    return next(r["result"]["id"] for r in tool_results(messages) if r["status"] == "ok" and "revision" in r["result"])


def _search_quote(messages: list[Message], word: str) -> str:
    for result in tool_results(messages):
        for hit in result.get("result", {}).get("hits", []):
            if word.lower() in hit["message"]["body"].lower():
                return f"{hit['message']['actor']} wrote: \u201c{hit['message']['body']}\u201d"
    return "I found nothing on that."


TURNS: list[DemoTurn] = [
    DemoTurn(
        "D03PRIYA",
        "U01PRIYA",
        datetime(2025, 3, 25, 9, 5, tzinfo=UTC),
        "When does the Atlas beta launch now? I need it for the Globex call.",
        (
            calls(("recall", {"query": "Atlas beta launch date"})),
            says(lambda m: f"Monday 28 April 2025 [{_item_id(m, 'launches')}]: two weeks later than first planned."),
        ),
    ),
    DemoTurn(
        "D03PRIYA",
        "U01PRIYA",
        datetime(2025, 3, 25, 9, 20, tzinfo=UTC),
        "Which time zone should the standup invites use for me?",
        (
            calls(("recall", {"query": "where I am based, standup time"})),
            says(
                lambda m: (
                    f"Western European Time: you are based in Lisbon [{_item_id(m, 'Lisbon')}], and standup "
                    f"is Tuesday and Thursday at 9:30 CET [{_item_id(m, 'standup')}], so 8:30 for you."
                )
            ),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        datetime(2025, 3, 25, 11, 0, tzinfo=UTC),
        "Could you review the new dashboard palette for me? You know how I like feedback.",
        (
            calls(("recall", {"query": "design feedback format colour charts"})),
            says(
                lambda m: (
                    f"Here it is as a numbered list with Figma frame names [{_item_id(m, 'numbered')}], and "
                    f"I describe colours by name and pattern, not red and green [{_item_id(m, 'colour')}]."
                )
            ),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        datetime(2025, 3, 25, 11, 30, tzinfo=UTC),
        "What did Marco say about the canary stage after the incident?",
        (
            calls(("search_history", {"query": "canary minutes incident"})),
            says(lambda m: _search_quote(m, "45 minutes")),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        datetime(2025, 3, 25, 12, 0, tzinfo=UTC),
        "I'm taking next Friday off, so please move my design review to Thursday.",
        (
            # The over-generalisation the demo invites Sam to correct on the turn's page: one Friday
            # off is not "never works on Fridays".
            calls(
                (
                    "remember",
                    {
                        "body": "Does not work on Fridays.",
                        "belief_type": "user_model_attr",
                        "subject": "speaker",
                        "authority": "inferred",
                        "confidence": 0.6,
                    },
                )
            ),
            says(
                lambda m: (
                    f"Done: the review moves to Thursday, and I noted that you are off on Fridays [{_written_id(m)}]."
                )
            ),
        ),
    ),
]


def _host() -> str:
    """A host name this installation answers to (the requests never leave the process)."""
    for host in settings.ALLOWED_HOSTS:
        if host and "*" not in host and not host.startswith("."):
            return host
    return "localhost"


@contextmanager
def _connection_kept() -> Iterator[None]:
    """The in-process requests share this command's database connection; Django closes a server
    request's connection when it finishes (or even starts), which here would close the command's own,
    inside a caller's transaction too. Django's test client keeps it open the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def demo_turns_run(*, agent: RuntimeAgent) -> list[str]:
    """Drive :data:`TURNS` for the demo agent through the API; a summary line per turn."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    key = api_key_create(agent=agent, label="demo turns")
    base_url = f"https://{_host()}"
    transport = httpx.WSGITransport(app=get_wsgi_application())
    lines = []
    try:
        with (
            _connection_kept(),
            httpx.Client(transport=transport) as http,
            Engram(base_url, key.secret, http_client=http) as engram,
        ):
            sessions: dict[str, int] = {}
            for index, demo in enumerate(TURNS):
                actor = Actor.objects.get(connector__agent=agent, external_id=demo.actor)
                conversation = Conversation.objects.get(agent=agent, external_thread_id=demo.thread)
                window = list(
                    StoredMessage.objects.filter(conversation=conversation)
                    .order_by("-created_at", "-pk")
                    .values_list("pk", flat=True)[:WINDOW]
                )[::-1]
                (inbound,) = engram.ingest(
                    [
                        {
                            "connector": {"type": actor.connector.type, "name": actor.connector.name},
                            "thread": {
                                "external_id": demo.thread,
                                "title": conversation.title,
                                "audience": {"kind": "members", "readers": [demo.actor]},
                            },
                            "actor": {"external_id": actor.external_id, "display_name": actor.display_name},
                            "external_id": f"demo-turn-{index}",
                            "body": demo.text,
                            "created_at": demo.when.isoformat(),
                            "evidence": {"method": "connector_signed", "detail": {"demo": True}},
                        }
                    ]
                )
                if demo.thread not in sessions:
                    session = engram.open_session(inbound.conversation_id, requester_actor_id=actor.pk)
                    sessions[demo.thread] = session.session_id
                session = engram.session(sessions[demo.thread])
                model = ScriptedModel(list(demo.steps))
                outcome = run_turn(engram, session, inbound.message_id, demo.text, model, loaded_message_ids=window)
                lines.append(f"turn for {actor.display_name}: {outcome.text[:70]}")
    finally:
        api_key_revoke(api_key=key.api_key)
    return lines
