"""A hanging semantic provider, seen through the HTTP API: every call that consults it answers
within its 3 s deadline (well under 4 s), degraded to authorized lexical results, with
``semantic_timeout`` recorded.

The service-level versions are ``tests/embeddings/test_semantic_retrieval.py``
(``test_an_outage_degrades_to_authorized_lexical_results_with_the_category_recorded``) and
``tests/history/test_search_contract.py``
(``test_a_semantic_provider_outage_degrades_to_lexical_results_never_to_unfiltered_ones``); this is
the runtime's view of the same contract: turn start, ``recall`` and ``search_history`` rounds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from history.models import ConversationSearchEvent
from memory.models import RetrievalEvent
from memory.retrieval.providers import PROVIDER_DEADLINE_S, ArmHit
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory

HANG_S = 5.0
ANSWER_WITHIN_S = 4.0


class HangingRevisions:
    name = "semantic"
    in_database = False

    def candidates(self, eligible: Any, query: Any, limit: int) -> Sequence[ArmHit]:
        time.sleep(HANG_S)
        return []


class HangingMessages:
    name = "semantic"
    in_database = False

    def message_candidates(self, eligible: Any, text: str, limit: int) -> Sequence[ArmHit]:
        time.sleep(HANG_S)
        return []


@pytest.fixture
def runtime(db: None) -> Runtime:
    runtime = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        runtime.say("general", person, "Morning all")
    return runtime


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_hanging_semantic_provider_degrades_every_api_call_to_authorized_lexical_results_in_time(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert PROVIDER_DEADLINE_S < ANSWER_WITHIN_S
    public_turn = runtime.turn("general", "U300", "The Q3 roadmap review is on Thursday.")
    public = runtime.round(public_turn["turn_id"], {"verb": "remember", "body": "The Q3 roadmap review is Thursday."})
    private_turn = runtime.turn("dm-alice", "U200", "The Q3 roadmap review makes me nervous.")
    private = runtime.round(private_turn["turn_id"], {"verb": "remember", "body": "Q3 roadmap review worries Alice."})
    public_id = public.json()["results"][0]["result"]["id"]
    private_id = private.json()["results"][0]["result"]["id"]
    private_message = runtime.conversation("dm-alice").messages.order_by("-pk").values_list("pk", flat=True)

    def hanging() -> tuple[list[HangingRevisions], list[HangingMessages], str]:
        return [HangingRevisions()], [HangingMessages()], ""

    monkeypatch.setattr("memory.retrieval.service.semantic_providers", hanging)
    monkeypatch.setattr("memory.retrieval.history_search.search.semantic_providers", hanging)

    message = runtime.say("general", "U300", "What about the Q3 roadmap review?")
    session = runtime.session("general", "U300")
    started, seconds = timed(lambda: runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": message}))
    assert started.status_code == 201 and seconds < ANSWER_WITHIN_S, (started.status_code, seconds)
    turn_id = started.json()["turn_id"]

    recalled, seconds = timed(lambda: runtime.round(turn_id, {"verb": "recall", "query": "Q3 roadmap review"}))
    assert recalled.status_code == 200 and seconds < ANSWER_WITHIN_S, (recalled.status_code, seconds)
    result = recalled.json()["results"][0]["result"]
    ids = [item["id"] for item in result["items"]]
    assert public_id in ids and private_id not in ids
    assert result["degradation"] == "semantic_timeout"
    assert RetrievalEvent.objects.get(trace_id=result["trace_id"]).degradation == "semantic_timeout"

    searched, seconds = timed(lambda: runtime.round(turn_id, {"verb": "search_history", "query": "roadmap review"}))
    assert searched.status_code == 200 and seconds < ANSWER_WITHIN_S, (searched.status_code, seconds)
    found = searched.json()["results"][0]
    assert found["status"] == "ok" and found["result"]["message_ids"]
    assert not set(found["result"]["message_ids"]) & set(private_message)
    event = ConversationSearchEvent.objects.filter(turn_id=turn_id).latest("pk")
    assert event.degradation == "semantic_timeout"
