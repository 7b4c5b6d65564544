"""A few real turns in the demo workspace, so the end-user view ("what did the agent know?") has
something to show on first run: Priya and Sam ask the demo agent things in their direct messages, and a
scripted agent answers through the agent API with the Python client, exactly as a runtime would
(ingest, session, turn, rounds, ledger, reply). Each message arrives as its turn runs, so the turns
follow on from the transcript, which ``load_demo`` dates to end shortly before the load.

The script cites only what its own calls returned, chosen by identity, never by wording: a memory is
cited when the recall returned exactly the revision ``load_demo`` wrote for that fact, a message is
quoted when the search returned exactly that message, and a memory the turn writes is cited by the id
its remember call returned. If a call did not return the row, the demo fails to load rather than cite
something else.

Sam's last turn leaves a memory worth correcting: the agent over-generalises his one Friday off into
"does not work on Fridays", about Sam and resting on his message. Sam can correct it on that turn's
page and on his "what the agent knows about you" page.

The requests go through Django's whole stack (middleware, authentication, DRF) in this process, over
httpx's WSGI transport, so no server needs to be running while the demo loads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from django.conf import settings
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from engram_client import Engram
from engram_client.agent import Message, ScriptedModel, Step, calls, recalled_items, run_turn, says, tool_results

from accounts.models import Actor, RuntimeAgent
from accounts.services import api_key_create, api_key_revoke
from demo.calendar import DemoCalendar, day_text
from history.models import Conversation
from history.models import Message as StoredMessage

#: Messages of its conversation the runtime loads into the prompt with each turn.
WINDOW = 3


@dataclass(frozen=True)
class Loaded:
    """What ``load_demo`` wrote, by the keys of its tables, for the turns to recognise in their calls'
    results."""

    summary: list[str]
    calendar: DemoCalendar
    #: memory key -> the id of its current revision (forgotten memories are absent)
    revisions: Mapping[str, int]
    #: transcript key -> message id
    messages: Mapping[str, int]


@dataclass(frozen=True)
class Script:
    """One turn as the scripted agent sees it: what the demo loaded, and the message it answers."""

    loaded: Loaded
    inbound_message_id: int
    speaker_actor_id: int

    def cite(self, messages: list[Message], memory: str) -> str:
        """The id of the recalled item that is exactly the memory ``load_demo`` wrote as ``memory``."""
        revision_id = self.loaded.revisions[memory]
        for item in recalled_items(messages):
            if item["revision_id"] == revision_id:
                return str(item["id"])
        raise LookupError(f"the turn's recall did not return the demo memory {memory!r}")

    def found(self, messages: list[Message], message: str) -> dict[str, Any]:
        """The search hit that is exactly the transcript message ``message``."""
        message_id = self.loaded.messages[message]
        for result in _results_of(messages, "search_history"):
            for hit in result.get("hits", []):
                if hit["message"]["message_id"] == message_id:
                    return dict(hit["message"])
        raise LookupError(f"the turn's search did not return the demo message {message!r}")


def _results_of(messages: list[Message], tool: str) -> list[dict[str, Any]]:
    """The results of the calls of ``tool`` that succeeded, oldest first."""
    names = {call["id"]: call["function"]["name"] for message in messages for call in message.get("tool_calls") or []}
    answered = [m for m in messages if m.get("role") == "tool" and names.get(m.get("tool_call_id")) == tool]
    contents = tool_results(answered)
    return [content["result"] for content in contents if content["status"] == "ok"]


def _written_id(messages: list[Message]) -> str:
    """The id of the memory the turn's remember call wrote."""
    (written,) = _results_of(messages, "remember")
    return str(written["id"])


@dataclass(frozen=True)
class DemoTurn:
    thread: str
    actor: str  # external id
    text: str
    steps: Callable[[Script], tuple[Step, ...]]


def _quoted(author: str, message: dict[str, Any]) -> str:
    """A message the search returned, quoted word for word with its date."""
    written = datetime.fromisoformat(message["created_at"]).date()
    return f"{author} wrote on {day_text(written)}: \u201c{message['body']}\u201d"


TURNS: list[DemoTurn] = [
    DemoTurn(
        "D03PRIYA",
        "U01PRIYA",
        "When does the Atlas beta launch now? I need it for the Globex call.",
        lambda s: (
            calls(("recall", {"query": "Atlas beta launch date"})),
            says(
                lambda m: (
                    f"{day_text(s.loaded.calendar.beta_launch_moved, year=True)} [{s.cite(m, 'launch')}]: "
                    "two weeks later than first planned."
                )
            ),
        ),
    ),
    DemoTurn(
        "D03PRIYA",
        "U01PRIYA",
        "Which time zone should the standup invites use for me?",
        lambda s: (
            calls(("recall", {"query": "where I am based, standup time"})),
            says(
                lambda m: (
                    f"Western European Time: you are based in Lisbon [{s.cite(m, 'priya_lisbon')}], and standup "
                    f"is Tuesday and Thursday at 9:30 CET [{s.cite(m, 'standup')}], so 8:30 for you."
                )
            ),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        "Could you review the new dashboard palette for me? You know how I like feedback.",
        lambda s: (
            calls(("recall", {"query": "design feedback format colour charts"})),
            says(
                lambda m: (
                    f"Here it is as a numbered list with Figma frame names [{s.cite(m, 'sam_feedback')}], and "
                    f"I describe colours by name and pattern, not red and green [{s.cite(m, 'sam_colour')}]."
                )
            ),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        "What did Marco say about the canary stage after the incident?",
        # Marco's follow-up after the incident is in #atlas-core, which Sam does not read: the search
        # finds only his rule in #general, and the agent quotes that.
        lambda s: (
            calls(("search_history", {"query": "canary stage", "actor": "Marco Bianchi"})),
            says(
                lambda m: (
                    f"{_quoted('Marco', s.found(m, 'g_canary'))} That is the only thing from him on the canary "
                    "stage that I can share here."
                )
            ),
        ),
    ),
    DemoTurn(
        "D04SAMLI",
        "U03SAMLI",
        "I'm taking next Friday off, so please move my design review to Thursday.",
        # The over-generalisation the demo invites Sam to correct (on this turn's page, or on his
        # "what the agent knows about you" page): one Friday off is not "never works on Fridays". It is
        # about Sam and rests on his message, so it is his to correct.
        lambda s: (
            calls(
                (
                    "remember",
                    {
                        "body": "Does not work on Fridays.",
                        "belief_type": "user_model_attr",
                        "subject_actor_id": s.speaker_actor_id,
                        "source_message_ids": [s.inbound_message_id],
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


def demo_turns_run(*, agent: RuntimeAgent, loaded: Loaded) -> list[str]:
    """Drive :data:`TURNS` for the demo agent through the API, each message arriving as its turn runs;
    a summary line per turn."""
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
                            "created_at": timezone.now().isoformat(),
                            "evidence": {"method": "connector_signed", "detail": {"demo": True}},
                        }
                    ]
                )
                if demo.thread not in sessions:
                    session = engram.open_session(inbound.conversation_id, requester_actor_id=actor.pk)
                    sessions[demo.thread] = session.session_id
                session = engram.session(sessions[demo.thread])
                script = Script(loaded=loaded, inbound_message_id=inbound.message_id, speaker_actor_id=actor.pk)
                model = ScriptedModel(list(demo.steps(script)))
                outcome = run_turn(engram, session, inbound.message_id, demo.text, model, loaded_message_ids=window)
                lines.append(f"turn for {actor.display_name}: {outcome.text[:70]}")
    finally:
        api_key_revoke(api_key=key.api_key)
    return lines
