"""Locust workload for ``manage.py loadtest``: simulated agent runtimes driving Engram over HTTP.

This file runs inside Locust's gevent process and never imports Django: everything it needs comes
from the JSON plan named by ``ENGRAM_LOADTEST_PLAN`` (written by the ``loadtest`` command), one entry
per agent with its API key, connector, people, threads and query vocabulary.

Each simulated user is one runtime bound to one agent (users are dealt round-robin over the plan's
agents) and one of that agent's threads; it opens its own session when it starts, then repeats a
mixed workload:

* ``turn`` (weight 6): ingest the inbound message, start a turn, one round with ``recall`` and
  ``search_history``, read the ledger, submit the reply citing what was recalled;
* ``ingest`` (weight 3): a plain connector batch of 1-5 messages;
* ``write turn`` (weight 1): a turn whose rounds ``remember`` a fact and then ``amend`` it, then the
  ledger (which must name both) and the reply.

A reply the pre-delivery recheck withholds (409 ``reply_withheld``: a write turn amended a memory
another user's reply cited) completes its turn and is counted apart from errors.

Between a user's tasks it waits ``ENGRAM_LOADTEST_WAIT`` seconds (``min,max``: the next inbound
message), and between the steps of a turn ``ENGRAM_LOADTEST_THINK`` seconds (the model's work). The
whole-turn time recorded as ``turn`` (and ``turn:read`` / ``turn:write``) is the sum of the turn's
HTTP round trips, without the think time.

Every request and turn is also kept in memory and written, when Locust quits, to the JSON file named
by ``ENGRAM_LOADTEST_SAMPLES``: per name the response times in ms and the error count, a few error
messages, and the wall time of the measured run.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from locust import FastHttpUser, events, task

PLAN: dict[str, Any] = json.loads(Path(os.environ["ENGRAM_LOADTEST_PLAN"]).read_text())
SAMPLES_PATH = os.environ.get("ENGRAM_LOADTEST_SAMPLES", "")
WAIT = tuple(float(x) for x in os.environ.get("ENGRAM_LOADTEST_WAIT", "1,3").split(","))
THINK = tuple(float(x) for x in os.environ.get("ENGRAM_LOADTEST_THINK", "0.1,0.4").split(","))
#: Kept error messages (the counts are complete; the messages are examples).
MAX_ERROR_EXAMPLES = 20
TURN = "TURN"

_samples: dict[str, list[float]] = defaultdict(list)
_errors: dict[str, int] = defaultdict(int)
#: Replies the pre-delivery recheck withheld, by request name (an answer the spec requires, not an error).
_withheld: dict[str, int] = defaultdict(int)
_examples: list[str] = []
_window: dict[str, float] = {}
_user_numbers = itertools.count()


@events.test_start.add_listener
def _on_test_start(**_: Any) -> None:
    _window["started"] = time.time()


@events.test_stop.add_listener
def _on_test_stop(**_: Any) -> None:
    _window["stopped"] = time.time()


@events.request.add_listener
def _on_request(request_type: str, name: str, response_time: float, exception: Any = None, **_: Any) -> None:
    _samples[name].append(float(response_time))
    if exception is not None:
        _errors[name] += 1
        if len(_examples) < MAX_ERROR_EXAMPLES:
            _examples.append(f"{name}: {str(exception)[:500]}")


@events.quitting.add_listener
def _on_quitting(**_: Any) -> None:
    if not SAMPLES_PATH:
        return
    body = {
        "started": _window.get("started"),
        "stopped": _window.get("stopped", time.time()),
        "turn_kind": TURN,
        "samples": _samples,
        "errors": _errors,
        "withheld": _withheld,
        "examples": _examples,
    }
    Path(SAMPLES_PATH).write_text(json.dumps(body))


class StepFailed(Exception):
    """A step answered something other than what a correct runtime expects."""


#: What :meth:`Runtime.call` returns for a reply the pre-delivery recheck withheld.
WITHHELD: dict[str, Any] = {"withheld": True}


def _code(response: Any) -> str:
    """The machine-readable ``code`` of an error answer, or "" when it has none."""
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("code", "")) if isinstance(body, dict) else ""


class Runtime(FastHttpUser):
    """One agent runtime: one agent, one thread, its own session."""

    def wait_time(self) -> float:
        return random.uniform(*WAIT)

    def on_start(self) -> None:
        number = next(_user_numbers)
        self.plan = PLAN["agents"][number % len(PLAN["agents"])]
        # Users sharing an agent take different threads of it where there are enough.
        self.thread = self.plan["threads"][(number // len(PLAN["agents"])) % len(self.plan["threads"])]
        self.rng = random.Random(f"{PLAN['run']}-{number}")
        self.tag = f"{PLAN['run']}-u{number}"
        self.said = 0
        self.recent: list[int] = []
        self.headers = {"Authorization": f"Bearer {self.plan['key']}"}
        body = {"conversation_id": self.thread["conversation_id"], "requester_actor_id": self.thread["requester"]["id"]}
        opened, _ = self.call("POST", "/api/v1/sessions", "session_open", 201, body)
        self.session_id = int(opened["session_id"]) if opened else 0

    # ------------------------------------------------------------------------------------------
    # requests
    # ------------------------------------------------------------------------------------------

    def call(
        self, method: str, path: str, name: str, expect: int, body: Any = None, *, may_withhold: bool = False
    ) -> tuple[Any, float]:
        """The JSON answer and the round trip in ms; an unexpected status is a failure (and None).

        ``may_withhold``: a reply the pre-delivery recheck withheld answers :data:`WITHHELD`. Under a
        mixed load another runtime of the same agent may amend a memory the reply cited between its
        recall and its delivery; withholding that reply is what the recheck is specified to do."""
        started = time.perf_counter()
        with self.client.request(
            method, path, name=name, json=body, headers=self.headers, catch_response=True
        ) as response:
            elapsed = (time.perf_counter() - started) * 1000
            if may_withhold and response.status_code == 409 and _code(response) == "reply_withheld":
                _withheld[name] += 1
                response.success()
                return WITHHELD, elapsed
            if response.status_code != expect:
                response.failure(f"{response.status_code} {(response.text or '')[:300]}")
                return None, elapsed
            try:
                data = response.json()
            except ValueError:
                response.failure("not JSON")
                return None, elapsed
            if name.startswith("round") and any(r["status"] == "error" for r in data["results"]):
                response.failure(json.dumps([r for r in data["results"] if r["status"] == "error"])[:500])
                return None, elapsed
            response.success()
            return data, elapsed

    def think(self) -> None:
        time.sleep(self.rng.uniform(*THINK))

    def person(self) -> dict[str, Any]:
        if self.thread["audience"]["kind"] == "members":
            return dict(self.thread["requester"])
        return dict(self.rng.choice(self.plan["people"]))

    def message(self, who: dict[str, Any], body: str) -> dict[str, Any]:
        self.said += 1
        connector_type, connector_name = self.plan["connector"]
        return {
            "connector": {"type": connector_type, "name": connector_name},
            "thread": {"external_id": self.thread["external_id"], "audience": self.thread["audience"]},
            "actor": {"external_id": who["external_id"], "display_name": who["display_name"]},
            "external_id": f"load-{self.tag}-{self.said}",
            "body": body,
            "created_at": datetime.now(UTC).isoformat(),
            "evidence": {"method": "connector_signed", "detail": {"load": True}},
        }

    def words(self, most: int = 3) -> list[str]:
        return self.rng.sample(self.plan["vocabulary"], self.rng.randint(1, most))

    def open_turn(self, text: str) -> tuple[dict[str, Any], dict[str, float]]:
        """Ingest the inbound message and start a turn for it; raises StepFailed on a failure."""
        ms: dict[str, float] = {}
        inbound = self.message(self.thread["requester"], text)
        ingested, ms["ingest"] = self.call("POST", "/api/v1/messages", "ingest", 201, {"messages": [inbound]})
        if ingested is None:
            raise StepFailed("ingest")
        message_id = int(ingested["messages"][0]["message_id"])
        body = {"inbound_message_id": message_id, "loaded_message_ids": self.recent[-5:]}
        turn, ms["turn_start"] = self.call("POST", f"/api/v1/sessions/{self.session_id}/turns", "turn_start", 201, body)
        if turn is None:
            raise StepFailed("turn_start")
        self.recent.append(message_id)
        return turn, ms

    def finish_turn(self, turn_id: int, cited: list[str], ms: dict[str, float], *, committed: int = 0) -> None:
        """Read the ledger (it must list ``committed`` operations) and deliver the reply."""
        ledger, ms["ledger"] = self.call("GET", f"/api/v1/turns/{turn_id}/ledger", "ledger", 200)
        if ledger is None:
            raise StepFailed("ledger")
        if len(ledger["operations"]) != committed:
            raise StepFailed(f"the ledger lists {len(ledger['operations'])} operations, not {committed}")
        self.think()
        body = {"body": "Thanks, here is what I have" + "".join(f" [{c}]" for c in cited) + ".", "cited_ids": cited}
        delivered, ms["reply"] = self.call(
            "POST", f"/api/v1/turns/{turn_id}/reply", "reply", 201, body, may_withhold=True
        )
        if delivered is None:
            raise StepFailed("reply")
        if delivered is not WITHHELD:
            self.recent.append(int(delivered["message_id"]))

    def record_turn(self, kind: str, ms: dict[str, float], error: Exception | None) -> None:
        total = sum(ms.values())
        for name in ("turn", f"turn:{kind}"):
            self.environment.events.request.fire(
                request_type=TURN,
                name=name,
                response_time=total,
                response_length=0,
                exception=error,
                context={},
            )

    # ------------------------------------------------------------------------------------------
    # the workload
    # ------------------------------------------------------------------------------------------

    @task(6)
    def read_turn(self) -> None:
        if not self.session_id:
            return
        words = self.words()
        ms: dict[str, float] = {}
        try:
            turn, ms = self.open_turn(f"What do you remember about {' '.join(words)}?")
            self.think()
            calls = [
                {"verb": "recall", "query": " ".join(words)},
                {"verb": "search_history", "query": self.rng.choice(words), "limit": 8},
            ]
            ran, ms["round"] = self.call(
                "POST", f"/api/v1/turns/{turn['turn_id']}/rounds", "round", 200, {"calls": calls}
            )
            if ran is None:
                raise StepFailed("round")
            items = ran["results"][0]["result"].get("items", [])
            self.finish_turn(turn["turn_id"], [items[0]["id"]] if items else [], ms)
        except StepFailed as error:
            self.record_turn("read", ms, error)
            return
        self.record_turn("read", ms, None)

    @task(3)
    def ingest(self) -> None:
        batch = [
            self.message(self.person(), f"Quick note on {' '.join(self.words(4))}.")
            for _ in range(self.rng.randint(1, 5))
        ]
        self.call("POST", "/api/v1/messages", "ingest_batch", 201, {"messages": batch})

    @task(1)
    def write_turn(self) -> None:
        if not self.session_id:
            return
        word = self.rng.choice(self.plan["vocabulary"])
        ms: dict[str, float] = {}
        try:
            turn, ms = self.open_turn(f"Please remember that I now prefer {word} ({self.tag}-{self.said}).")
            turn_path = f"/api/v1/turns/{turn['turn_id']}"
            self.think()
            remember = {
                "verb": "remember",
                "body": f"Prefers {word} ({self.tag}-{self.said}).",
                "belief_type": "preference",
                "subject": "speaker",
            }
            made, ms["round_remember"] = self.call(
                "POST", f"{turn_path}/rounds", "round_remember", 200, {"calls": [remember]}
            )
            if made is None:
                raise StepFailed("round_remember")
            memory_id = made["results"][0]["result"]["id"]
            self.think()
            amend = {"verb": "amend", "id": memory_id, "body": f"Strongly prefers {word} ({self.tag}-{self.said})."}
            amended, ms["round_amend"] = self.call(
                "POST", f"{turn_path}/rounds", "round_amend", 200, {"calls": [amend]}
            )
            if amended is None:
                raise StepFailed("round_amend")
            self.finish_turn(turn["turn_id"], [amended["results"][0]["result"]["id"]], ms, committed=2)
        except StepFailed as error:
            self.record_turn("write", ms, error)
            return
        self.record_turn("write", ms, None)
