"""API key scopes, through the HTTP API: a ``runtime`` key calls what an agent runtime calls and is
refused the management reads with ``403 insufficient_scope`` before anything is read or written; a
``manage`` key reads the agent's memories; a manage-only key cannot start a turn or call any runtime
endpoint; a key may carry both. The database refuses a key without a known scope,
and keys issued before scopes existed became runtime keys (tests/db/test_migrations.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from accounts.models import ApiKey, ApiScope
from accounts.services import api_key_create
from config.errors import ServiceError
from history.models import Session, Turn
from memory.models import MemoryEntry
from tests.api.conftest import Runtime, runtime_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def remembered(runtime: Runtime) -> list[int]:
    """Two memories of the runtime's agent, written in a turn: their entry ids, newest first."""
    turn = runtime.turn("dm-alice", "U200", "I moved to Lisbon and I drink oolong.")
    ran = runtime.round(
        turn["turn_id"],
        {"verb": "remember", "body": "Lives in Lisbon.", "belief_type": "user_model_attr"},
        {"verb": "remember", "body": "Drinks oolong tea.", "belief_type": "preference"},
    )
    assert [r["status"] for r in ran.json()["results"]] == ["ok", "ok"], ran.json()
    return list(
        MemoryEntry.objects.filter(agent=runtime.agent).order_by("-created_at", "-id").values_list("pk", flat=True)
    )


def refused_for_scope(response: Any, scope: str) -> None:
    assert response.status_code == 403, response.json()
    body = response.json()
    assert body["code"] == "insufficient_scope"
    assert body["detail"]["required_scope"] == scope
    assert scope in body["message"]


def test_a_runtime_key_is_refused_the_management_reads_and_nothing_is_written(
    runtime: Runtime, remembered: list[int]
) -> None:
    """403 insufficient_scope naming `manage`, with no memory in the body and no audit row."""
    for path in ("/api/v1/memories", "/api/v1/memories?status=live", f"/api/v1/memories/{remembered[0]}"):
        response = runtime.get(path)
        refused_for_scope(response, "manage")
        assert response.json()["detail"]["key_scopes"] == ["runtime"]
        assert "Lisbon" not in response.content.decode()


def test_a_manage_only_key_cannot_start_a_turn_or_call_any_runtime_endpoint(runtime: Runtime) -> None:
    """Refused before the view runs: no message ingested, no session opened, no turn started."""
    manager = runtime.manager()
    inbound = runtime.say("dm-alice", "U200", "What do you know about me?")
    session = runtime.session("dm-alice", "U200")
    counts = (Session.objects.count(), Turn.objects.count())

    refused_for_scope(manager.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound}), "runtime")
    refused_for_scope(
        manager.post("/api/v1/sessions", {"conversation_id": runtime.conversation("dm-alice").pk}), "runtime"
    )
    refused_for_scope(manager.post("/api/v1/messages", {"messages": []}), "runtime")
    refused_for_scope(manager.get(f"/api/v1/sessions/{session}"), "runtime")
    refused_for_scope(manager.get("/api/v1/tools"), "runtime")
    assert (Session.objects.count(), Turn.objects.count()) == counts

    # The runtime key of the same agent starts it.
    started = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound})
    assert started.status_code == 201, started.json()


def test_a_key_with_both_scopes_calls_both(runtime: Runtime, remembered: list[int]) -> None:
    both = runtime_for(runtime.agent, ApiScope.RUNTIME, ApiScope.MANAGE)
    assert both.get("/api/v1/memories").status_code == 200
    assert both.turn("general", "U100", "Morning, what is new?")["turn_id"]


def test_no_key_is_still_401_before_any_scope(runtime: Runtime) -> None:
    runtime.client.credentials()
    for path in ("/api/v1/memories", "/api/v1/tools"):
        response = runtime.get(path)
        assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


def test_the_database_refuses_a_key_with_no_scope_or_an_unknown_one(runtime: Runtime) -> None:
    key = ApiKey.objects.get(agent=runtime.agent)
    for scopes in ([], ["admin"], ["runtime", "root"]):
        with pytest.raises(IntegrityError), transaction.atomic():
            ApiKey.objects.filter(pk=key.pk).update(scopes=scopes)
    for scopes in ([], ["admin"]):
        with pytest.raises(ServiceError, match="scope"):
            api_key_create(agent=runtime.agent, scopes=scopes)
    assert api_key_create(agent=runtime.agent, scopes=["manage", "runtime", "manage"]).api_key.scopes == [
        "runtime",
        "manage",
    ]


def test_the_schema_names_each_operations_scope_and_documents_the_403(runtime: Runtime) -> None:
    schema = runtime.client.get("/api/schema/?format=json").json()
    operations = {
        (path, method): operation for path, item in schema["paths"].items() for method, operation in item.items()
    }
    assert operations[("/api/v1/memories", "get")]["x-required-scope"] == "manage"
    assert operations[("/api/v1/memories/{entry_id}", "get")]["x-required-scope"] == "manage"
    assert operations[("/api/v1/sessions/{session_id}/turns", "post")]["x-required-scope"] == "runtime"
    agent_operations = [
        op for (path, _), op in operations.items() if path.startswith("/api/v1/") and "/me/" not in path
    ]
    assert agent_operations and all("403" in op["responses"] for op in agent_operations)
    assert all(op.get("x-required-scope") in {"runtime", "manage"} for op in agent_operations)
    assert all("x-required-scope" not in op for (path, _), op in operations.items() if "/me/" in path)
