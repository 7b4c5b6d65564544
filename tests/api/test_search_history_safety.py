"""The ``search_history`` verb through the agent API never hands the agent a poisoned or secret line:
the same safety scan as memory recall, per line, with ids kept and the search audit counting them."""

from __future__ import annotations

import json

import pytest

from history.models import ConversationSearchEvent, Message
from memory.retrieval.safety import INJECTION, SECRET
from tests.api.conftest import Runtime
from tests.history.test_search_safety import CREDENTIAL, POISON

pytestmark = pytest.mark.django_db


def test_the_search_history_verb_never_hands_the_agent_a_poisoned_or_secret_line(runtime: Runtime) -> None:
    """Through the agent API: the round's result lists every id, marks the withheld lines, and the
    poisoned and secret texts appear nowhere in the response."""
    poisoned = runtime.say("general", "U300", POISON)
    secret = runtime.say("general", "U100", CREDENTIAL)
    turn = runtime.turn("general", "U200", "What were the deploy notes?")

    response = runtime.round(turn["turn_id"], {"verb": "search_history", "query": "deploy notes pipeline"})

    assert response.status_code == 200, response.json()
    result = response.json()["results"][0]["result"]
    assert {poisoned, secret} <= set(result["message_ids"])
    lines = {m["message_id"]: m for hit in result["hits"] for m in [*hit["before"], hit["message"], *hit["after"]]}
    assert lines[poisoned]["blocked"] == INJECTION and lines[secret]["blocked"] == SECRET
    assert result["blocked"] == 2
    text = json.dumps(response.json())
    assert "ignore all previous instructions" not in text and "hunter2" not in text
    event = ConversationSearchEvent.objects.get(turn_id=turn["turn_id"])
    assert sorted(event.blocked_message_ids) == sorted([poisoned, secret])
    # The stored lines are untouched: blocking is how they are shown, not a change to history.
    assert Message.objects.get(pk=poisoned).body == POISON
