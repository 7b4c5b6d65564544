"""API key scopes, through the HTTP API: a ``runtime`` key calls what an agent runtime calls and is
refused the management reads with ``403 insufficient_scope`` before anything is read or written; a
``manage`` key reads the agent's memories, and each read leaves an append-only audit row naming the
key, the endpoint, the entry ids shown and the list's filters; a manage-only key cannot start a turn
or call any runtime endpoint; a key may carry both. The database refuses a key without a known scope,
and keys issued before scopes existed became runtime keys (tests/db/test_migrations.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, transaction

from accounts.models import ApiKey, ApiScope
from accounts.services import api_key_create
from config.errors import ServiceError
from history.models import Session, Turn
from memory.models import ManagementEndpoint, ManagementReadEvent, MemoryEntry
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def remembered(runtime: Runtime) -> list[int]:
    """Two memories of the runtime's agent, written in a turn: their entry ids, newest first."""
    turn = runtime.turn("dm-alice", "U200", "I moved to Lisbon and I drink oolong.")
    ran = runtime.round(
        turn["turn_id"],
        {"verb": "remember", "body": "Lives in Lisbon.", "belief_type": "user_model_attr", "subject": "speaker"},
        {"verb": "remember", "body": "Drinks oolong tea.", "belief_type": "preference", "subject": "speaker"},
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
    assert not ManagementReadEvent.objects.exists()


def test_a_manage_key_reads_and_each_read_is_audited_with_the_key_and_the_ids(
    runtime: Runtime, remembered: list[int]
) -> None:
    manager = runtime.manager()
    key = ApiKey.objects.get(agent=runtime.agent, scopes=[ApiScope.MANAGE])

    listed = manager.get("/api/v1/memories?status=live&page_size=1")
    assert listed.status_code == 200, listed.json()
    assert [m["id"] for m in listed.json()["results"]] == remembered[:1]
    detail = manager.get(f"/api/v1/memories/{remembered[1]}")
    assert detail.status_code == 200 and detail.json()["id"] == remembered[1]

    first, second = ManagementReadEvent.objects.order_by("pk")
    assert (first.agent_id, first.api_key_id, first.endpoint) == (
        runtime.agent.pk,
        key.pk,
        ManagementEndpoint.MEMORIES_LIST,
    )
    assert first.entry_ids == remembered[:1]
    assert first.filters == {"status": "live", "page_size": 1}
    assert (second.api_key_id, second.endpoint, second.entry_ids, second.filters) == (
        key.pk,
        ManagementEndpoint.MEMORIES_RETRIEVE,
        [remembered[1]],
        {},
    )
    assert first.created_at <= second.created_at


def test_a_read_that_answers_404_or_400_records_nothing(runtime: Runtime, remembered: list[int]) -> None:
    manager = runtime.manager()
    stranger = runtime_for(AgentFactory.create(tenant=runtime.agent.tenant), ApiScope.MANAGE)
    assert stranger.get(f"/api/v1/memories/{remembered[0]}").status_code == 404
    assert manager.get("/api/v1/memories/999999999").status_code == 404
    assert manager.get("/api/v1/memories?status=alive").status_code == 400
    assert not ManagementReadEvent.objects.exists()


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
    assert ManagementReadEvent.objects.count() == 1


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


def test_the_audit_rows_refuse_update_and_delete_in_the_database(runtime: Runtime, remembered: list[int]) -> None:
    assert runtime.manager().get(f"/api/v1/memories/{remembered[0]}").status_code == 200
    row = ManagementReadEvent.objects.get()
    with pytest.raises(DatabaseError, match="pgtrigger: Cannot"), transaction.atomic():
        ManagementReadEvent.objects.filter(pk=row.pk).update(entry_ids=[1])
    with pytest.raises(DatabaseError, match="pgtrigger: Cannot"), transaction.atomic():
        ManagementReadEvent.objects.filter(pk=row.pk).delete()
    assert ManagementReadEvent.objects.get().entry_ids == [remembered[0]]


def test_the_schema_names_each_operations_scope_and_documents_the_403(runtime: Runtime) -> None:
    schema = runtime.client.get("/api/schema/?format=json").json()
    operations = {
        (path, method): operation for path, item in schema["paths"].items() for method, operation in item.items()
    }
    assert operations[("/api/v1/memories", "get")]["x-required-scope"] == "manage"
    assert operations[("/api/v1/memories/{memory_id}", "get")]["x-required-scope"] == "manage"
    assert operations[("/api/v1/sessions/{session_id}/turns", "post")]["x-required-scope"] == "runtime"
    agent_operations = [
        op for (path, _), op in operations.items() if path.startswith("/api/v1/") and "/me/" not in path
    ]
    assert agent_operations and all("403" in op["responses"] for op in agent_operations)
    assert all(op.get("x-required-scope") in {"runtime", "manage"} for op in agent_operations)
    assert all("x-required-scope" not in op for (path, _), op in operations.items() if "/me/" in path)
