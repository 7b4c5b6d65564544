"""A whole turn's statements: nested atomic blocks whose failure fails their caller take no savepoint,
so the only one a turn takes is ingest's, which lets a concurrent duplicate of the inbound message
be answered with the row that won."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.backends import utils

from tests.api.conftest import runtime_for
from tests.factories import AgentFactory

# Committed rows, as in production: each request's transaction is outermost, and the round's second
# read runs on a read worker's own connection.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every statement sent through Django's cursors, on any thread, with the thread that sent it."""
    sent: list[tuple[str, str]] = []
    execute = utils.CursorWrapper.execute

    def recording(self: utils.CursorWrapper, sql: str, params: Any = None) -> Any:
        sent.append((threading.current_thread().name, sql))
        return execute(self, sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "execute", recording)
    yield sent


def test_a_turn_takes_one_savepoint_the_ingest_guard_against_a_concurrent_duplicate(
    statements: list[tuple[str, str]],
) -> None:
    runtime = runtime_for(AgentFactory.create())
    runtime.say("general", "U100", "The deploy freeze starts on Friday at noon.")
    runtime.say("general", "U300", "The freeze covers the billing service too.")
    runtime.say("general", "U200", "Morning all")
    session = runtime.session("general", "U200")
    statements.clear()

    inbound = runtime.say("general", "U200", "When does the deploy freeze start?")
    started = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound})
    assert started.status_code == 201, started.json()
    turn_id = started.json()["turn_id"]
    ran = runtime.round(
        turn_id, {"verb": "recall", "query": "deploy freeze"}, {"verb": "search_history", "query": "freeze"}
    )
    assert [r["status"] for r in ran.json()["results"]] == ["ok", "ok"]
    assert ran.json()["results"][1]["result"]["message_ids"], "the search found the freeze messages"
    assert runtime.get(f"/api/v1/turns/{turn_id}/ledger").status_code == 200
    assert runtime.reply(turn_id, "The freeze starts on Friday at noon.").status_code == 201

    savepoints = [sql for _, sql in statements if sql.startswith("SAVEPOINT")]
    assert len(savepoints) == 1
    searched_on = {thread for thread, sql in statements if "history_conversationsearchevent" in sql}
    assert len(searched_on) == 1 and searched_on != {threading.current_thread().name}, "the search ran beside"


def test_a_message_to_a_members_room_reads_its_known_people_in_one_statement(
    statements: list[tuple[str, str]],
) -> None:
    """The author and every reader of a members room are actors the connector has seen; ingest reads
    them together, not one statement each, and the message keeps exactly that audience."""
    runtime = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        runtime.say("general", person, "Morning all")
    leads = {"kind": "members", "readers": ["U100", "U200", "U300"]}
    statements.clear()

    runtime.say("leads", "U200", "The offsite moves to Lisbon.", audience=leads)

    actor_reads = [sql for _, sql in statements if sql.startswith("SELECT") and "FROM accounts_actor x" in sql]
    assert len(actor_reads) == 1
    readers = {runtime.actor(person).pk for person in ("U100", "U200", "U300")}
    assert set(runtime.conversation("leads").audience_readers) == readers
