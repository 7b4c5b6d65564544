"""The agent runtime API through HTTP: bounded rounds validated before execution, the committed ledger,
the claim guard, the pre-delivery recheck, sharing only by people, and perspective isolation."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from history.models import Message, Turn, TurnState
from memory.models import MemoryEntry, MemoryOperation, MemoryRevision, SharingGrant
from memory.retention import conversation_delete
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def remember(body: str, **extra: object) -> dict[str, object]:
    return {"verb": "remember", "body": body, **extra}


def test_the_spec_000_production_incident_fails_the_turn(runtime: Runtime) -> None:
    """Two remembers, then a reply claiming re-attribution and supersession: the claim guard fails the
    turn, and the store holds two independent revision-1 entries, the first untouched."""
    turn = runtime.turn("general", "U300", "Actually it's Victor who prefers tabs, not me.")
    victor = runtime.actor("U100").pk
    first = runtime.round(turn["turn_id"], remember("Prefers tabs over spaces."))
    second = runtime.round(turn["turn_id"], remember("Prefers tabs over spaces.", subject_actor_id=victor))
    assert first.status_code == second.status_code == 200

    ledger = runtime.get(f"/api/v1/turns/{turn['turn_id']}/ledger").json()
    assert [op["operation"] for op in ledger["operations"]] == ["remember", "remember"]
    assert "Do not claim that any memory was superseded" in ledger["instruction"]
    assert "re-attributed" in ledger["instruction"]

    response = runtime.reply(
        turn["turn_id"],
        "Done! I've re-attributed the earlier memory to Victor and marked the old entry as superseded. "
        "Since this is a shared workspace I stored it anonymously.",
    )

    assert response.status_code == 422
    assert response.json()["code"] == "claim_guard_failed"
    assert {c["kind"] for c in response.json()["detail"]["claims"]} == {
        "reattribution",
        "supersession",
        "anonymous_storage",
    }
    assert Turn.objects.get(pk=turn["turn_id"]).state == TurnState.FAILED
    entries = MemoryEntry.objects.filter(agent=runtime.agent)
    assert entries.count() == 2
    assert sorted(MemoryRevision.objects.filter(entry__in=entries).values_list("number", flat=True)) == [1, 1]
    assert not Message.objects.filter(agent=runtime.agent, direction="outbound").exists()


def test_a_round_with_a_malformed_second_call_commits_nothing(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "Remember that I like green tea.")
    response = runtime.round(
        turn["turn_id"],
        remember("Likes green tea."),
        {"verb": "remember", "body": "x", "entry_id": 1, "supersede": True},
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert set(response.json()["detail"]["calls"]["1"]) == {"entry_id", "supersede"}
    assert not MemoryEntry.objects.filter(agent=runtime.agent).exists()
    assert Turn.objects.get(pk=turn["turn_id"]).rounds_used == 0


def test_remembers_schema_has_no_entry_id_revision_or_supersede_flag(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "hi")
    for forbidden in ({"entry_id": 3}, {"revision": 2}, {"supersede": True}, {"id": "m:00000001"}):
        response = runtime.round(turn["turn_id"], remember("Likes tea.", **forbidden))
        assert response.status_code == 400, forbidden
    assert not MemoryEntry.objects.filter(agent=runtime.agent).exists()


def test_a_fourth_round_is_refused_and_the_third_offers_no_tools(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "What do you know about me?")
    assert turn["tools"] and turn["rounds_left"] == 3
    for n in (1, 2, 3):
        body = runtime.round(turn["turn_id"], {"verb": "recall", "query": "tea"}).json()
        assert body["round"] == n
    assert body["tools"] == [] and body["final"] is True

    fourth = runtime.round(turn["turn_id"], {"verb": "recall", "query": "tea"})

    assert fourth.status_code == 409 and fourth.json()["code"] == "round_limit"
    assert runtime.get(f"/api/v1/turns/{turn['turn_id']}").json()["tools"] == []


def test_fan_out_inside_a_round_is_bounded(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "hi")
    response = runtime.round(turn["turn_id"], *[{"verb": "recall", "query": "x"}] * 9)
    assert response.status_code == 400
    assert Turn.objects.get(pk=turn["turn_id"]).rounds_used == 0


def test_a_body_only_amend_does_not_license_a_reattribution_claim(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "I drive a Civic")
    made = runtime.round(turn["turn_id"], remember("Drives a Civic.", subject_actor_id=runtime.actor("U200").pk))
    memory_id = made.json()["results"][0]["result"]["id"]
    amended = runtime.round(turn["turn_id"], {"verb": "amend", "id": memory_id, "body": "Drives a Model 3."})
    assert amended.json()["results"][0]["status"] == "ok"
    assert amended.json()["results"][0]["result"]["subject_changed"] is False

    response = runtime.reply(turn["turn_id"], "I've re-attributed that memory to your partner.")

    assert response.status_code == 422 and response.json()["code"] == "claim_guard_failed"
    assert [c["kind"] for c in response.json()["detail"]["claims"]] == ["reattribution"]


def test_an_amend_that_changed_the_subject_licenses_reattribution_and_supersession(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U300", "That tabs preference is Victor's, not mine")
    made = runtime.round(turn["turn_id"], remember("Prefers tabs.", subject_actor_id=runtime.actor("U300").pk))
    memory_id = made.json()["results"][0]["result"]["id"]
    runtime.round(turn["turn_id"], {"verb": "amend", "id": memory_id, "subject_actor_id": runtime.actor("U100").pk})

    response = runtime.reply(turn["turn_id"], "I've re-attributed it to Victor and updated the memory.")

    assert response.status_code == 201, response.json()


def test_forgetting_an_unknown_id_says_so_and_adds_nothing_to_the_ledger(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "forget my address")
    response = runtime.round(turn["turn_id"], {"verb": "forget", "id": "m:00abcdef"})
    result = response.json()["results"][0]
    assert response.status_code == 200
    assert (result["status"], result["code"]) == ("unchanged", "unknown_memory")
    assert runtime.get(f"/api/v1/turns/{turn['turn_id']}/ledger").json()["operations"] == []
    assert not MemoryOperation.objects.filter(turn_id=turn["turn_id"]).exists()

    deletion = runtime.reply(turn["turn_id"], "I've deleted your address.")
    assert deletion.status_code == 422 and deletion.json()["detail"]["claims"][0]["kind"] == "deletion"


def test_forgetting_twice_changes_nothing_the_second_time(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "remember then forget")
    memory_id = runtime.round(turn["turn_id"], remember("Lives on Elm St.")).json()["results"][0]["result"]["id"]
    first = runtime.round(turn["turn_id"], {"verb": "forget", "id": memory_id}).json()["results"][0]
    second = runtime.round(turn["turn_id"], {"verb": "forget", "id": memory_id}).json()["results"][0]
    assert first["status"] == "ok"
    assert (second["status"], second["code"]) == ("unchanged", "already_forgotten")
    assert [op.kind for op in MemoryOperation.objects.filter(turn_id=turn["turn_id"])] == ["remember", "forget"]


def share_alices_launch_date(runtime: Runtime, alice_browser: APIClient) -> tuple[int, str]:
    """Alice tells the agent a date in her DM; the agent asks to share it with #general; Alice approves."""
    runtime.say("general", "U300", "anyone know the launch date?")
    turn = runtime.turn("dm-alice", "U200", "The launch is March 3; fine to tell #general.")
    memory_id = runtime.round(turn["turn_id"], remember("The launch is on March 3.")).json()["results"][0]["result"][
        "id"
    ]
    general = runtime.conversation("general").pk
    asked = runtime.round(
        turn["turn_id"], {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general}
    ).json()["results"][0]
    assert asked["status"] == "ok", asked
    assert not SharingGrant.objects.exists()  # a request is not a grant
    decided = alice_browser.post(
        f"/api/v1/me/sharing-requests/{asked['result']['request_id']}/decision", {"approve": True}, format="json"
    )
    assert decided.status_code == 200, decided.json()
    return int(decided.json()["grant_id"]), memory_id


def recall_in_general(runtime: Runtime) -> list[str]:
    turn = runtime.turn("general", "U300", "When is the launch?")
    result = runtime.round(turn["turn_id"], {"verb": "recall", "query": "launch date March"}).json()
    return [item["id"] for item in result["results"][0]["result"]["items"]]


def test_an_approved_grant_discloses_and_a_revoked_grant_hides_the_revision(
    runtime: Runtime, alice_browser: APIClient
) -> None:
    grant_id, memory_id = share_alices_launch_date(runtime, alice_browser)
    assert memory_id in recall_in_general(runtime)

    revoked = alice_browser.post(f"/api/v1/me/grants/{grant_id}/revoke", format="json")

    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert memory_id not in recall_in_general(runtime)


def test_a_model_cannot_make_a_grant(runtime: Runtime, alice_browser: APIClient) -> None:
    """Neither a verb argument nor the confirmation endpoint lets an agent create a grant."""
    turn = runtime.turn("dm-alice", "U200", "Share it")
    memory_id = runtime.round(turn["turn_id"], remember("Salary is 90k.")).json()["results"][0]["result"]["id"]
    general = runtime.conversation("general").pk
    smuggled = runtime.round(
        turn["turn_id"],
        {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general, "approved": True},
    )
    assert smuggled.status_code == 400
    asked = runtime.round(
        turn["turn_id"], {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general}
    ).json()["results"][0]["result"]

    as_agent = runtime.post(f"/api/v1/me/sharing-requests/{asked['request_id']}/decision", {"approve": True})

    assert as_agent.status_code in (401, 403)
    assert not SharingGrant.objects.exists()


def test_the_pre_delivery_recheck_withholds_a_reply_after_an_audience_change(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U300", "what did we decide about the freeze?")
    runtime.round(turn["turn_id"], {"verb": "search_history", "query": "freeze"})
    # The channel is made private before the reply goes out.
    runtime.say("general", "U100", "making this channel private", audience={"kind": "members", "readers": ["U100"]})

    response = runtime.reply(turn["turn_id"], "We decided to freeze deploys on Fridays.")

    assert response.status_code == 409
    assert response.json()["code"] == "reply_withheld"
    assert response.json()["detail"]["reason"] == "audience_changed"
    assert Turn.objects.get(pk=turn["turn_id"]).state == TurnState.WITHHELD


def withheld_because(response: Any) -> str:
    assert response.status_code == 409, response.json()
    assert response.json()["code"] == "reply_withheld"
    return str(response.json()["detail"]["reason"])


def test_the_recheck_withholds_a_reply_citing_a_memory_amended_elsewhere_meanwhile(runtime: Runtime) -> None:
    first = runtime.turn("dm-alice", "U200", "I drink oolong tea.")
    memory_id = runtime.round(first["turn_id"], remember("Drinks oolong tea.")).json()["results"][0]["result"]["id"]
    assert runtime.reply(first["turn_id"], "Noted.").status_code == 201
    turn = runtime.turn("dm-alice", "U200", "Which tea do I drink?")
    recalled = runtime.round(turn["turn_id"], {"verb": "recall", "query": "oolong tea"}).json()
    assert memory_id in [item["id"] for item in recalled["results"][0]["result"]["items"]]
    # Meanwhile another turn corrects it.
    other = runtime.turn("dm-alice", "U200", "I switched to green tea.")
    amended = runtime.round(other["turn_id"], {"verb": "amend", "id": memory_id, "body": "Drinks green tea."})
    assert amended.json()["results"][0]["status"] == "ok", amended.json()

    response = runtime.reply(turn["turn_id"], f"You drink oolong [{memory_id}].")

    assert withheld_because(response) == "memory_changed"
    assert Turn.objects.get(pk=turn["turn_id"]).state == TurnState.WITHHELD


def test_the_recheck_withholds_a_reply_built_on_a_memory_whose_grant_was_revoked_meanwhile(
    runtime: Runtime, alice_browser: APIClient
) -> None:
    grant_id, memory_id = share_alices_launch_date(runtime, alice_browser)
    turn = runtime.turn("general", "U300", "When is the launch?")
    recalled = runtime.round(turn["turn_id"], {"verb": "recall", "query": "launch date March"}).json()
    assert memory_id in [item["id"] for item in recalled["results"][0]["result"]["items"]]
    assert alice_browser.post(f"/api/v1/me/grants/{grant_id}/revoke", format="json").status_code == 200

    response = runtime.reply(turn["turn_id"], "The launch is on March 3.")

    assert withheld_because(response) == "memory_no_longer_disclosable"


def test_the_recheck_withholds_a_reply_whose_loaded_history_was_deleted_meanwhile(runtime: Runtime) -> None:
    plan = runtime.say("general", "U100", "The offsite moves to Lisbon in May.")
    inbound = runtime.say("dm-alice", "U200", "Where is the offsite again?")
    session = runtime.session("dm-alice", "U200")
    started = runtime.post(
        f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound, "loaded_message_ids": [plan]}
    )
    assert started.status_code == 201, started.json()
    conversation_delete(conversation=runtime.conversation("general"))

    response = runtime.reply(started.json()["turn_id"], "The offsite is in Lisbon, in May.")

    assert withheld_because(response) == "history_no_longer_disclosable"
    assert not Message.objects.filter(agent=runtime.agent, direction="outbound").exists()


def test_a_delivered_reply_stores_its_provenance_including_searched_history(runtime: Runtime) -> None:
    decided = runtime.say("general", "U100", "Decision: deploy freeze every Friday from now on.")
    turn = runtime.turn("general", "U300", "what did we decide about the deploy freeze?")
    found = runtime.round(turn["turn_id"], {"verb": "search_history", "query": "deploy freeze decision"}).json()
    assert decided in found["results"][0]["result"]["message_ids"]

    response = runtime.reply(turn["turn_id"], "We freeze deploys on Fridays.")

    assert response.status_code == 201, response.json()
    reply = Message.objects.get(pk=response.json()["message_id"])
    assert decided in reply.history_message_ids
    assert reply.direction == "outbound" and reply.evidence.method == "agent_reply"


def test_cited_ids_mark_memories_used_and_unknown_citations_are_ignored(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "I like oolong tea")
    memory_id = runtime.round(turn["turn_id"], remember("Likes oolong tea.")).json()["results"][0]["result"]["id"]
    response = runtime.reply(turn["turn_id"], f"Noted [{memory_id}], and [m:0fffffff].")
    assert response.status_code == 201
    assert response.json()["cited"] == [memory_id] and response.json()["ignored_citations"] == ["m:0fffffff"]
    assert MemoryEntry.objects.get(agent=runtime.agent).last_used_at is not None


def test_usage_feedback_raises_what_the_reply_cited_and_lowers_what_it_was_shown_and_left(runtime: Runtime) -> None:
    setup = runtime.turn("dm-alice", "U200", "Remember a few things about me")
    written = runtime.round(
        setup["turn_id"], remember("Likes oolong tea."), remember("Rides a blue bicycle."), remember("Speaks Welsh.")
    ).json()["results"]
    assert runtime.reply(setup["turn_id"], "Noted.").status_code == 201
    tea, bicycle, welsh = (MemoryEntry.objects.get(pk=r["result"]["entry_id"]) for r in written)

    turn = runtime.turn("dm-alice", "U200", "what tea do I like, and what do I ride?")
    shown = runtime.round(turn["turn_id"], {"verb": "recall", "query": "oolong tea blue bicycle"}).json()
    shown_entries = {item["entry_id"] for item in shown["results"][0]["result"]["items"]}
    shown_entries |= {item["entry_id"] for item in turn["recall"]["items"]}
    assert {tea.pk, bicycle.pk} <= shown_entries and welsh.pk not in shown_entries
    tea_id = next(i["id"] for i in shown["results"][0]["result"]["items"] if i["entry_id"] == tea.pk)

    assert runtime.reply(turn["turn_id"], f"You like oolong [{tea_id}].").status_code == 201

    for entry, change in ((tea, 1.0), (bicycle, -0.1), (welsh, 0.0)):
        after = MemoryEntry.objects.get(pk=entry.pk)
        assert after.utility == pytest.approx(entry.utility + change), entry
    assert MemoryEntry.objects.get(pk=tea.pk).last_used_at is not None
    assert MemoryEntry.objects.get(pk=bicycle.pk).last_used_at == bicycle.last_used_at


def test_another_agents_objects_answer_404_like_missing_ones(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "remember my tea")
    memory_id = runtime.round(turn["turn_id"], remember("Likes tea.")).json()["results"][0]["result"]["id"]
    session = Turn.objects.get(pk=turn["turn_id"]).session_id
    trace = turn["recall"]["trace_id"]
    other = runtime_for(AgentFactory.create(tenant=runtime.agent.tenant))

    for path in (
        f"/api/v1/turns/{turn['turn_id']}",
        f"/api/v1/turns/{turn['turn_id']}/ledger",
        f"/api/v1/sessions/{session}",
        f"/api/v1/traces/{trace}",
        "/api/v1/turns/999999",
    ):
        response = other.get(path)
        assert response.status_code == 404 and response.json()["code"] == "not_found", path
    assert other.round(turn["turn_id"], {"verb": "recall", "query": "tea"}).status_code == 404
    assert other.reply(turn["turn_id"], "hi").status_code == 404

    own_turn = other.turn("dm-alice", "U200", "forget that")
    result = other.round(own_turn["turn_id"], {"verb": "forget", "id": memory_id}).json()["results"][0]
    assert (result["status"], result["code"]) == ("unchanged", "unknown_memory")
    assert MemoryEntry.objects.get(agent=runtime.agent).status == "live"


def test_requests_without_a_valid_key_are_refused(runtime: Runtime) -> None:
    anonymous = APIClient()
    assert anonymous.get("/api/v1/turns/1").status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer egk_nope_nope")
    response = anonymous.get("/api/v1/turns/1")
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


def test_ingest_is_idempotent_on_the_external_message_id(runtime: Runtime) -> None:
    message = {
        "connector": {"type": "slack", "name": "acme"},
        "thread": {"external_id": "general", "audience": {"kind": "workspace"}},
        "actor": {"external_id": "U100", "display_name": "Victor"},
        "external_id": "ts-fixed",
        "body": "hello",
        "created_at": "2026-11-30T09:00:00Z",
        "evidence": {"method": "connector_signed"},
    }
    before = Message.objects.filter(agent=runtime.agent).count()
    first = runtime.post("/api/v1/messages", {"messages": [message]}).json()["messages"][0]
    again = runtime.post("/api/v1/messages", {"messages": [message]}).json()["messages"][0]
    assert first["created"] is True and again["created"] is False
    assert again["message_id"] == first["message_id"]
    assert Message.objects.filter(agent=runtime.agent).count() == before + 1


def test_a_bad_batch_changes_nothing(runtime: Runtime) -> None:
    good = {
        "connector": {"type": "slack", "name": "acme"},
        "thread": {"external_id": "general", "audience": {"kind": "workspace"}},
        "actor": {"external_id": "U100", "display_name": "Victor"},
        "body": "hello",
        "created_at": "2026-11-30T09:00:00Z",
        "evidence": {"method": "connector_signed"},
    }
    bad = {**good, "evidence": {"method": "agent_reply"}}
    before = Message.objects.filter(agent=runtime.agent).count()
    response = runtime.post("/api/v1/messages", {"messages": [good, bad]})
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert "1" in str(response.json()["detail"]) and "method" in str(response.json()["detail"])
    assert Message.objects.filter(agent=runtime.agent).count() == before
