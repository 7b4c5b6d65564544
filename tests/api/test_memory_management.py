"""The management API: an agent lists and reads its own memories outside any turn, with a key of the
manage scope; another agent's or tenant's memory answers 404 like a missing one; the reads leave no
trace, retrieval event or ledger entry (their own audit is tests/api/test_api_key_scopes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from accounts.models import ApiScope
from memory.models import (
    ManagementReadEvent,
    MemoryEntry,
    MemoryOperation,
    RecallTrace,
    RetrievalEvent,
    SharingGrant,
    SharingRequest,
)
from memory.rejections import rejection_record
from memory.sharing import sharing_request_review
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory
from tests.ui.conftest import World, build_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None) -> World:
    """Alice's and Bob's world of the end-user pages: six memories, a traced turn."""
    return build_world()


def listed(runtime: Runtime, query: str = "") -> dict[str, Any]:
    response = runtime.get(f"/api/v1/memories{query}")
    assert response.status_code == 200, response.json()
    return dict(response.json())


def provenance_rows() -> tuple[object, ...]:
    return (
        RecallTrace.objects.count(),
        RetrievalEvent.objects.count(),
        MemoryOperation.objects.count(),
        *MemoryEntry.objects.order_by("pk").values_list("utility", flat=True),
    )


def test_an_agent_lists_its_own_memories_with_filters_and_cursor_pages(world: World) -> None:
    """Every filter only narrows; the cursor walks every entry once; nothing of another agent appears."""
    agent = world.runtime
    runtime = agent.manager()
    stranger = runtime_for(AgentFactory.create())
    stranger.say("general", "U100", "Morning all")
    before = provenance_rows()

    everything = listed(runtime)
    ids = [m["id"] for m in everything["results"]]
    own = set(MemoryEntry.objects.filter(agent=runtime.agent).values_list("pk", flat=True))
    assert set(ids) == own and len(ids) == len(own) == 6
    lisbon = next(m for m in everything["results"] if m["id"] == world.revisions["lisbon"].entry_id)
    assert lisbon["current"]["body"] == "Lives in Lisbon." and lisbon["current"]["subject"]["name"].startswith("Alice")
    assert lisbon["current"]["id"] == world.short("lisbon")

    alice, bob = agent.actor("U200"), agent.actor("U300")
    about_alice = {m["id"] for m in listed(runtime, f"?subject_actor_id={alice.pk}")["results"]}
    assert about_alice == {world.revisions[k].entry_id for k in ("lisbon", "tea", "manager", "poison")}
    from_bob = {m["id"] for m in listed(runtime, f"?source_actor_id={bob.pk}")["results"]}
    assert from_bob == {world.revisions["salary"].entry_id}
    assert listed(runtime, "?status=forgotten")["results"] == []
    assert listed(runtime, "?flagged=true")["results"] == []
    assert {m["id"] for m in listed(runtime, "?portability=portable&flagged=false")["results"]} <= own
    assert listed(runtime, "?project=nowhere")["results"] == []

    seen: list[int] = []
    page = listed(runtime, "?page_size=4")
    while True:
        seen += [m["id"] for m in page["results"]]
        if not page["next"]:
            break
        response = runtime.client.get(page["next"])
        assert response.status_code == 200
        page = response.json()
    assert seen == ids

    assert stranger.manager().get("/api/v1/memories").json()["results"] == []
    assert provenance_rows() == before


def test_one_memory_with_its_revision_history_evidence_grants_and_rejections(world: World) -> None:
    """The detail holds every revision, each with evidence ids, grants and rejection kinds (no message or
    correction text); another agent's key answers 404 exactly like a missing id."""
    runtime = world.runtime
    launch = world.revisions["launch"]
    turn = runtime.turn("general", "U100", "The atlas launch moved to March 10, tell the DM too.")
    amended = runtime.round(
        turn["turn_id"], {"verb": "amend", "id": launch.short_id, "body": "The atlas launch is on March 10."}
    ).json()["results"][0]["result"]
    told = runtime.turn("dm-alice", "U200", "You can tell #general where I live.")
    shared = runtime.round(
        told["turn_id"],
        {
            "verb": "request_memory_sharing",
            "id": world.short("lisbon"),
            "conversation_id": runtime.conversation("general").pk,
        },
    )
    assert shared.json()["results"][0]["status"] == "ok", shared.json()
    operator = User.objects.create_superuser(username="root", password="pw")
    sharing_request_review(request_id=SharingRequest.objects.get().pk, operator=operator, approve=True)
    item = world.traces()[0].items.get(revision=world.revisions["lisbon"])
    rejection_record(user=world.alice, trace_item_id=item.pk, kind="wrong")
    before = provenance_rows()
    manager = runtime.manager()

    response = manager.get(f"/api/v1/memories/{launch.entry_id}")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert [r["number"] for r in body["revisions"]] == [1, 2]
    first, second = body["revisions"]
    assert body["current"] == second["id"] == amended["id"]
    assert second["supersedes"] == first["id"]
    assert [e["kind"] for e in first["evidence"]][:1] == ["source_message"]
    assert all("body" not in e for e in first["evidence"] + second["evidence"])
    assert first["grants"] == second["grants"] == []

    lisbon = manager.get(f"/api/v1/memories/{world.revisions['lisbon'].entry_id}").json()
    (grant,) = lisbon["revisions"][0]["grants"]
    assert grant["by_operator"] and grant["revoked_at"] is None
    assert grant["id"] == SharingGrant.objects.get().pk
    (rejection,) = lisbon["revisions"][0]["rejections"]
    assert rejection["kind"] == "wrong" and rejection["has_correction"] is False and "correction" not in rejection

    stranger = runtime_for(AgentFactory.create(), ApiScope.MANAGE)
    missing = stranger.get(f"/api/v1/memories/{launch.entry_id}")
    nonexistent = stranger.get("/api/v1/memories/999999999")
    assert missing.status_code == nonexistent.status_code == 404
    assert missing.json() == nonexistent.json()
    assert missing.json()["code"] == "not_found"
    assert provenance_rows() == before


def test_a_memory_is_read_by_the_m_id_of_any_of_its_revisions_or_by_its_entry_id(world: World) -> None:
    """``GET /api/v1/memories/m:…`` reads the entry owning that revision, an old revision's id (an old
    citation) included, exactly as its entry id does; the read is audited with the entry id. Another
    agent's ``m:`` id answers 404 exactly like one that does not exist, and reads nothing."""
    runtime = world.runtime
    launch = world.revisions["launch"]
    turn = runtime.turn("general", "U100", "The atlas launch moved to March 10.")
    amended = runtime.round(
        turn["turn_id"], {"verb": "amend", "id": launch.short_id, "body": "The atlas launch is on March 10."}
    ).json()["results"][0]["result"]
    manager = runtime.manager()
    audited = ManagementReadEvent.objects.count()

    by_entry = manager.get(f"/api/v1/memories/{launch.entry_id}").json()
    by_old = manager.get(f"/api/v1/memories/{launch.short_id}").json()
    by_current = manager.get(f"/api/v1/memories/{amended['id']}").json()
    assert by_entry["id"] == by_old["id"] == by_current["id"] == launch.entry_id
    assert by_entry["current"] == by_old["current"] == by_current["current"] == amended["id"]
    assert [r["id"] for r in by_old["revisions"]] == [launch.short_id, amended["id"]]
    events = ManagementReadEvent.objects.order_by("pk")[audited:]
    assert [e.entry_ids for e in events] == [[launch.entry_id]] * 3

    stranger = runtime_for(AgentFactory.create(), ApiScope.MANAGE)
    theirs = stranger.get(f"/api/v1/memories/{amended['id']}")
    nonexistent = stranger.get("/api/v1/memories/m:7fffffffffffffff")
    assert theirs.status_code == nonexistent.status_code == 404
    assert theirs.json() == nonexistent.json()
    for malformed in ("m:", "m:xyz", "m:8000000000000000", "0", "m:0000002a0000002a0"):
        response = manager.get(f"/api/v1/memories/{malformed}")
        assert response.status_code == 404, malformed
        assert response.json()["code"] == "not_found", malformed
    assert ManagementReadEvent.objects.count() == audited + 3


def test_bad_filters_answer_400_with_a_code_and_no_key_answers_401(world: World) -> None:
    runtime = world.runtime.manager()
    for query in ("?status=alive", "?subject_actor_id=x", "?page_size=0", "?agent_id=1", "?flagged=maybe"):
        response = runtime.get(f"/api/v1/memories{query}")
        assert response.status_code == 400, query
        assert response.json()["code"] == "invalid_request", query
    runtime.client.credentials()
    assert runtime.get("/api/v1/memories").status_code == 401
    assert runtime.get(f"/api/v1/memories/{world.revisions['lisbon'].entry_id}").status_code == 401
