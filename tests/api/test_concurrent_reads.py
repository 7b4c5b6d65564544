"""A round's consecutive reads run side by side, on the read workers' own connections, and answer
exactly as they do one after another: same items, same hits, same audit rows, same turn evidence."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from history.models import ConversationSearchEvent, Turn
from memory.models import RecallMoment, RecallTrace
from memory.turns import VerbCall, read_groups, rounds
from tests.api.conftest import runtime_for
from tests.factories import AgentFactory

# Committed rows: the read workers' connections cannot see a test transaction's.
pytestmark = pytest.mark.django_db(transaction=True)


def test_reads_are_grouped_up_to_the_next_write_with_one_history_search_per_group() -> None:
    verbs = ["recall", "search_history", "search_history", "recall", "remember", "recall", "recall", "forget"]
    groups = read_groups([VerbCall(verb, {}) for verb in verbs])
    assert [[call.verb for call in group] for group in groups] == [
        ["recall", "search_history"],
        ["search_history", "recall"],
        ["remember"],
        ["recall", "recall"],
        ["forget"],
    ]


def test_a_recall_and_a_history_search_run_side_by_side_with_the_results_of_running_in_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = runtime_for(AgentFactory.create())
    runtime.say("general", "U100", "The deploy freeze starts on Friday at noon.")
    runtime.say("general", "U300", "Green tea is the only thing the kitchen has left.")
    runtime.say("dm-alice", "U200", "Remind me to order more green tea for the kitchen.")
    setup = runtime.turn("dm-alice", "U200", "Please remember my tea order.")
    written = runtime.round(setup["turn_id"], {"verb": "remember", "body": "Orders green tea for the kitchen."})
    assert written.status_code == 200, written.json()
    assert runtime.reply(setup["turn_id"], "Noted.").status_code == 201

    ran_on: list[tuple[str, str]] = []
    execute = rounds._execute

    def recording(context: Any, call: VerbCall) -> Any:
        ran_on.append((call.verb, threading.current_thread().name))
        return execute(context, call)

    monkeypatch.setattr(rounds, "_execute", recording)
    turn = runtime.turn("dm-alice", "U200", "What was that about green tea?")
    calls = [{"verb": "recall", "query": "green tea kitchen"}, {"verb": "search_history", "query": "green tea"}]
    side_by_side = runtime.round(turn["turn_id"], *calls)
    threads = dict(ran_on)
    ran_on.clear()
    monkeypatch.setattr(rounds, "read_groups", lambda calls: [[call] for call in calls])
    in_turn = runtime.round(turn["turn_id"], *calls)

    assert threads["recall"] == threading.current_thread().name
    assert threads["search_history"].startswith("engram-read-")
    assert {thread for _, thread in ran_on} == {threading.current_thread().name}
    first, second = side_by_side.json()["results"], in_turn.json()["results"]
    assert [r["status"] for r in first] == [r["status"] for r in second] == ["ok", "ok"]
    assert [i["id"] for i in first[0]["result"]["items"]] == [i["id"] for i in second[0]["result"]["items"]]
    assert first[0]["result"]["block"] == second[0]["result"]["block"]
    assert first[0]["result"]["items"], "the remembered order is recalled"
    found = first[1]["result"]["message_ids"]
    assert found and found == second[1]["result"]["message_ids"]
    assert RecallTrace.objects.filter(turn_id=turn["turn_id"], moment=RecallMoment.TOOL).count() == 2
    assert ConversationSearchEvent.objects.filter(turn_id=turn["turn_id"]).count() == 2
    assert Turn.objects.get(pk=turn["turn_id"]).evidence_message_ids == found
