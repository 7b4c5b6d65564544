"""A person's data as JSON: the operator's export (command and admin action) holds everything about
or from them; the person's own download holds only what their view ceiling allows. The admin's erase
action asks for confirmation, then erases through the same service as the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from accounts.models import OperatorScope
from memory.models import ErasureEvent, MemoryRevision, SharingRequest
from memory.rejections import rejection_record
from memory.sharing import sharing_request_decide_as_source
from tests.factories import TenantFactory
from tests.ui.conftest import World, build_world, remember

pytestmark = pytest.mark.django_db

PARTY = "Is planning a surprise party for Bob's birthday."


def bodies(document: dict[str, object]) -> set[str]:
    memories = document["memories"]
    assert isinstance(memories, list)
    return {r["body"] for m in memories for r in m["revisions"]}


@pytest.fixture
def alice_world(db: None) -> World:
    """Alice corrected a memory, approved sharing one, and Bob told the agent something about her in
    his own DM (a memory about Alice whose source audience is Bob's DM)."""
    world = build_world()
    runtime = world.runtime
    item = world.traces()[0].items.get(revision=world.revisions["tea"])
    rejection_record(user=world.alice, trace_item_id=item.pk, kind="not_true")
    told = runtime.turn("dm-alice", "U200", "You can tell #general where I live.")
    runtime.round(
        told["turn_id"],
        {
            "verb": "request_memory_sharing",
            "id": world.short("lisbon"),
            "conversation_id": runtime.conversation("general").pk,
        },
    )
    sharing_request_decide_as_source(request_id=SharingRequest.objects.get().pk, user=world.alice, approve=True)
    gossip = runtime.turn("dm-bob", "U300", "Alice is planning a surprise party for my birthday, don't tell her.")
    remember(runtime, gossip["turn_id"], {"body": PARTY, "subject_actor_id": runtime.actor("U200").pk})
    return world


def test_the_operator_export_holds_everything_about_or_from_the_person(alice_world: World, tmp_path: Path) -> None:
    """``export_person`` writes her messages, every memory about her (including one learned in Bob's
    DM) with its revision history, her rejection and the grant she approved; nothing of Bob's own."""
    alice = alice_world.runtime.actor("U200")
    output = tmp_path / "alice.json"
    call_command("export_person", str(alice.pk), "--output", str(output))
    document = json.loads(output.read_text())
    assert document["format"] == "engram.person-export/v1" and document["scope"] == "operator"
    assert [p["external_id"] for p in document["person"]] == ["U200"]
    assert {
        "I live in Lisbon, I drink green tea, and Victor is my manager.",
        "You can tell #general where I live.",
    } <= {m["body"] for m in document["messages"]}
    assert not [m for m in document["messages"] if "salary" in m["body"]]
    held = bodies(document)
    assert {"Lives in Lisbon.", "Drinks green tea every morning.", "Her manager is Victor.", PARTY} <= held
    assert "Earns 90k a year." not in held
    (rejection,) = document["rejections"]
    assert rejection["kind"] == "not_true" and rejection["revision"] == alice_world.short("tea")
    (grant,) = document["grants"]
    assert grant["revision"] == alice_world.short("lisbon") and grant["revoked_at"] is None
    assert document["counts"] == {
        "messages": len(document["messages"]),
        "memories": len(document["memories"]),
        "rejections": 1,
        "grants": 1,
    }


def test_the_person_downloads_only_what_their_view_ceiling_allows(alice_world: World) -> None:
    """From her pages Alice downloads her own data, but not the memory about her learned in Bob's DM;
    Mallory (no actor) gets an empty document; a visitor who is not logged in is sent to log in."""
    client = alice_world.client(alice_world.alice)
    assert 'href="/my-data/export.json"' in client.get("/turns/").content.decode()
    response = client.get("/my-data/export.json")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="engram-my-data.json"'
    document = json.loads(response.content)
    assert document["scope"] == "self"
    held = bodies(document)
    assert {"Lives in Lisbon.", "Drinks green tea every morning.", "Her manager is Victor."} <= held
    assert PARTY not in held
    assert MemoryRevision.objects.filter(body=PARTY).exists()
    assert len(document["rejections"]) == 1 and len(document["grants"]) == 1

    empty = json.loads(alice_world.client(alice_world.mallory).get("/my-data/export.json").content)
    assert (empty["person"], empty["messages"], empty["memories"]) == ([], [], [])
    assert Client().get("/my-data/export.json").status_code == 302


def test_the_admin_exports_and_erases_a_person_after_confirmation(alice_world: World) -> None:
    """The actor admin's export action answers the JSON document; its erase action first shows what
    would go and changes nothing, then erases on confirmation; another tenant's operator erases nothing."""
    alice = alice_world.runtime.actor("U200")
    root = User.objects.create_superuser(username="root", password="pw")
    client = Client()
    client.force_login(root)
    exported = client.post("/admin/accounts/actor/", {"action": "export_people", "_selected_action": [alice.pk]})
    assert exported.status_code == 200 and exported["Content-Type"] == "application/json"
    assert PARTY in bodies(json.loads(exported.content))

    outsider = User.objects.create_user(username="op", password="pw", is_staff=True)
    outsider.user_permissions.add(*Permission.objects.filter(codename__in=["view_actor", "delete_actor"]))
    OperatorScope.objects.create(user=outsider, tenant=TenantFactory.create())
    other = Client()
    other.force_login(outsider)
    other.post("/admin/accounts/actor/", {"action": "erase_people", "_selected_action": [alice.pk], "confirm": "yes"})
    assert not ErasureEvent.objects.exists()

    asked = client.post("/admin/accounts/actor/", {"action": "erase_people", "_selected_action": [alice.pk]})
    assert asked.status_code == 200 and "Yes, erase them" in asked.content.decode()
    assert not ErasureEvent.objects.exists()
    done = client.post(
        "/admin/accounts/actor/", {"action": "erase_people", "_selected_action": [alice.pk], "confirm": "yes"}
    )
    assert done.status_code == 302
    event = ErasureEvent.objects.get()
    assert event.actor_id == alice.pk and event.requested_by == "admin:root" and event.state == "complete"
    assert not MemoryRevision.objects.filter(body__in=["Lives in Lisbon.", PARTY]).exists()
    assert MemoryRevision.objects.filter(body="Earns 90k a year.").exists()
