"""Who a memory is about and whose words it rests on, through the HTTP API.

A turn lists the conversation's participants; a belief about a person names one of them as its
subject; the messages it was learned from decide its source actors (connector-authenticated authors,
never a model argument); sharing it needs the consent of each of them and of its subject; a belief
rejected about someone does not come back about nobody.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounts.models import UserActor
from history.models import Turn
from memory.models import CorrectionRelation, MemoryRevision, RecallTraceItem, SharingGrant, SharingRequest
from memory.selectors import correction_relations
from tests.api.conftest import Runtime

pytestmark = pytest.mark.django_db

#: A private group of three: Victor, Alice and Bob.
GROUP = "group-vab"
GROUP_AUDIENCE = {"kind": "members", "readers": ["U100", "U200", "U300"]}


def login(runtime: Runtime, external_id: str) -> APIClient:
    """The person behind ``external_id``, logged in to Engram as an end user."""
    user, _ = User.objects.get_or_create(username=f"user-{external_id}")
    UserActor.objects.get_or_create(user=user, actor=runtime.actor(external_id))
    client = APIClient()
    client.force_login(user)
    return client


def group_turn(runtime: Runtime, who: str, text: str, **turn: Any) -> dict[str, Any]:
    message = runtime.say(GROUP, who, text, audience=GROUP_AUDIENCE)
    session = runtime.session(GROUP, who)
    response = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": message, **turn})
    assert response.status_code == 201, response.json()
    return dict(response.json())


def remember(runtime: Runtime, turn_id: int, **call: Any) -> Any:
    return runtime.round(turn_id, {"verb": "remember", **call})


def share(runtime: Runtime, turn_id: int, memory_id: str, conversation_id: int) -> dict[str, Any]:
    call = {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": conversation_id}
    return only_result(runtime.round(turn_id, call))


def decide(client: APIClient, request_id: int, *, approve: bool) -> Any:
    return client.post(f"/api/v1/me/sharing-requests/{request_id}/decision", {"approve": approve}, format="json")


def turn_inbound(turn: dict[str, Any]) -> int:
    return int(Turn.objects.values_list("inbound_message_id", flat=True).get(pk=turn["turn_id"]))


def only_result(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.json()
    (result,) = response.json()["results"]
    return dict(result)


def test_a_turn_lists_the_participants_and_who_is_speaking(runtime: Runtime) -> None:
    runtime.say(GROUP, "U300", "hello both", audience=GROUP_AUDIENCE)
    turn = group_turn(runtime, "U200", "morning")
    people = {p["external_id"]: p for p in turn["participants"]}
    assert set(people) == {"U100", "U200", "U300"}
    assert turn["participants"][0]["external_id"] == "U200"  # the speaker first
    assert [p["external_id"] for p in turn["participants"] if p["speaking"]] == ["U200"]
    assert people["U300"] == {
        "actor_id": runtime.actor("U300").pk,
        "external_id": "U300",
        "display_name": "Bob",
        "connector": "slack:acme",
        "speaking": False,
    }
    # Reading the turn back lists them too; so does the session.
    assert runtime.get(f"/api/v1/turns/{turn['turn_id']}").json()["participants"] == turn["participants"]
    session = runtime.get(f"/api/v1/sessions/{turn['session_id']}").json()
    assert {p["external_id"] for p in session["participants"]} == {"U100", "U200", "U300"}


def test_a_belief_about_a_person_without_a_subject_is_refused_naming_the_participants(runtime: Runtime) -> None:
    turn = runtime.turn("dm-alice", "U200", "I prefer tabs over spaces.")
    before = MemoryRevision.objects.count()
    response = remember(runtime, turn["turn_id"], body="Prefers tabs over spaces.", belief_type="preference")
    assert response.status_code == 400, response.json()
    error = response.json()
    assert error["code"] == "subject_required"
    assert "Alice" in error["message"] and "speaker" in error["message"]
    assert [p["external_id"] for p in error["detail"]["participants"]] == ["U200"]
    assert MemoryRevision.objects.count() == before
    # Nothing was counted either: all three rounds are still there.
    assert runtime.get(f"/api/v1/turns/{turn['turn_id']}").json()["rounds_left"] == 3
    # A project fact may stay subject-less.
    fact = only_result(remember(runtime, turn["turn_id"], body="The style guide asks for tabs."))
    assert fact["status"] == "ok"


@pytest.mark.parametrize("subject", ["speaker", "U200"])
def test_the_subject_is_resolved_among_the_participants(runtime: Runtime, subject: str) -> None:
    turn = runtime.turn("dm-alice", "U200", "I prefer tabs over spaces.")
    result = only_result(
        remember(runtime, turn["turn_id"], body="Prefers tabs over spaces.", belief_type="preference", subject=subject)
    )
    assert result["status"] == "ok", result
    revision = MemoryRevision.objects.get(pk=result["result"]["revision_id"])
    assert revision.subject_id == runtime.actor("U200").pk
    assert revision.source_actor_ids == [runtime.actor("U200").pk]


def test_a_subject_outside_the_participants_is_refused_and_nothing_is_written(runtime: Runtime) -> None:
    """Bob is known to the agent (he spoke in #general) but takes no part in Alice's DM, and her
    message does not name him."""
    turn = runtime.turn("dm-alice", "U200", "My teammate prefers spaces.")
    before = MemoryRevision.objects.count()
    for call in ({"subject_actor_id": runtime.actor("U300").pk}, {"subject": "U300"}, {"subject": "Bob"}):
        result = only_result(
            remember(runtime, turn["turn_id"], body="Prefers spaces.", belief_type="preference", **call)
        )
        assert (result["status"], result["code"]) == ("error", "subject_not_participant"), result
        assert "Alice" in result["message"]
    assert MemoryRevision.objects.count() == before
    both = remember(runtime, turn["turn_id"], body="x", belief_type="preference", subject="speaker", subject_actor_id=1)
    assert both.status_code == 400


def test_a_person_the_message_names_may_be_the_subject(runtime: Runtime) -> None:
    """Bob tells the agent about Alice in his own DM: Alice, named in the message, is listed among the
    turn's participants and may be its subject; Victor, not named, may not."""
    turn = runtime.turn("dm-bob", "U300", "Alice is planning a surprise party, don't tell her.")
    listed = {p["external_id"]: p for p in turn["participants"]}
    assert set(listed) == {"U300", "U200"} and listed["U300"]["speaking"] and not listed["U200"]["speaking"]
    result = only_result(
        remember(runtime, turn["turn_id"], body="Is planning a surprise party.", belief_type="status", subject="U200")
    )
    assert result["status"] == "ok", result
    revision = MemoryRevision.objects.get(pk=result["result"]["revision_id"])
    assert (revision.subject_id, revision.source_actor_ids) == (runtime.actor("U200").pk, [runtime.actor("U300").pk])
    refused = only_result(remember(runtime, turn["turn_id"], body="Knows.", belief_type="status", subject="U100"))
    assert refused["code"] == "subject_not_participant"


def test_only_messages_in_front_of_the_turn_can_be_named_as_sources(runtime: Runtime) -> None:
    elsewhere = runtime.say("dm-bob", "U300", "My salary is 90k.")
    turn = runtime.turn("dm-alice", "U200", "What does Bob earn?")
    result = only_result(remember(runtime, turn["turn_id"], body="Bob earns 90k.", source_message_ids=[elsewhere]))
    assert (result["status"], result["code"]) == ("error", "unknown_source_message"), result
    assert not MemoryRevision.objects.filter(body="Bob earns 90k.").exists()


def test_the_group_salary_case_needs_bobs_consent_not_alices(runtime: Runtime) -> None:
    """In a private group Bob tells his salary; in Alice's next turn the agent remembers it about Bob,
    learned from Bob's message. Bob's words, Bob's subject: only Bob can let it out, and the label
    in #general names Bob."""
    bobs = runtime.say(GROUP, "U300", "my salary is 90k and I am interviewing at Globex", audience=GROUP_AUDIENCE)
    turn = group_turn(runtime, "U200", "good luck Bob!", loaded_message_ids=[bobs])
    result = only_result(
        remember(
            runtime,
            turn["turn_id"],
            body="Earns 90k and is interviewing at Globex.",
            belief_type="user_model_attr",
            subject="U300",
            source_message_ids=[bobs],
        )
    )
    assert result["status"] == "ok", result
    revision = MemoryRevision.objects.get(pk=result["result"]["revision_id"])
    bob, alice = runtime.actor("U300"), runtime.actor("U200")
    assert (revision.subject_id, revision.source_actor_ids) == (bob.pk, [bob.pk])

    general = runtime.conversation("general").pk
    ask = share(runtime, turn["turn_id"], result["result"]["id"], general)
    assert ask["status"] == "ok", ask
    assert ask["result"]["consents"] == [{"actor_id": bob.pk, "role": "source", "state": "pending"}]
    request_id = ask["result"]["request_id"]

    # Alice, who was in the room, is not asked and cannot decide it.
    alice_client = login(runtime, "U200")
    assert alice_client.get("/api/v1/me/sharing-requests").json() == []
    refused = decide(alice_client, request_id, approve=True)
    assert refused.status_code == 404
    assert not SharingGrant.objects.exists()

    bob_client = login(runtime, "U300")
    (listed,) = bob_client.get("/api/v1/me/sharing-requests").json()
    assert listed["consents"] == [{"actor_id": bob.pk, "label": "Bob (id U300)", "role": "source", "state": "pending"}]
    decided = decide(bob_client, request_id, approve=True)
    assert decided.json()["state"] == "approved" and decided.json()["grant_id"]

    # In #general the memory is now shown, attributed to Bob, not to Alice.
    later = runtime.turn("general", "U100", "Anything new about Globex interviews?")
    recalled = only_result(runtime.round(later["turn_id"], {"verb": "recall", "query": "Globex interviewing"}))
    (item,) = [i for i in recalled["result"]["items"] if i["revision_id"] == revision.pk]
    assert item["sources"] == [{"actor_id": bob.pk, "label": "Bob (id U300)"}]
    assert "Alice" not in recalled["result"]["block"]
    assert alice.pk not in revision.source_actor_ids


def test_the_subject_consents_too_when_someone_else_said_it(runtime: Runtime) -> None:
    """Remembered from Alice's own message about Bob: Alice said it, it is about Bob. Both are asked;
    Alice's consent alone grants nothing."""
    runtime.say(GROUP, "U300", "hi", audience=GROUP_AUDIENCE)
    turn = group_turn(runtime, "U200", "Bob is interviewing at Globex, keep it quiet")
    result = only_result(
        remember(runtime, turn["turn_id"], body="Is interviewing at Globex.", belief_type="status", subject="U300")
    )
    bob, alice = runtime.actor("U300"), runtime.actor("U200")
    general = runtime.conversation("general").pk
    ask = share(runtime, turn["turn_id"], result["result"]["id"], general)
    assert ask["result"]["consents"] == [
        {"actor_id": alice.pk, "role": "source", "state": "pending"},
        {"actor_id": bob.pk, "role": "subject", "state": "pending"},
    ]
    request_id = ask["result"]["request_id"]
    first = decide(login(runtime, "U200"), request_id, approve=True)
    assert first.json() == {"request_id": request_id, "state": "pending", "grant_id": None}
    assert not SharingGrant.objects.exists()
    bob_client = login(runtime, "U300")
    (listed,) = bob_client.get("/api/v1/me/sharing-requests").json()
    assert [(c["role"], c["state"]) for c in listed["consents"]] == [("source", "given"), ("subject", "pending")]
    second = decide(bob_client, request_id, approve=True)
    assert second.json()["state"] == "approved"
    assert SharingGrant.objects.get().revision_id == result["result"]["revision_id"]


def test_one_refusal_denies_the_request(runtime: Runtime) -> None:
    runtime.say(GROUP, "U300", "hi", audience=GROUP_AUDIENCE)
    turn = group_turn(runtime, "U200", "Bob is interviewing at Globex")
    result = only_result(
        remember(runtime, turn["turn_id"], body="Is interviewing at Globex.", belief_type="status", subject="U300")
    )
    general = runtime.conversation("general").pk
    ask = share(runtime, turn["turn_id"], result["result"]["id"], general)
    request_id = ask["result"]["request_id"]
    no = decide(login(runtime, "U300"), request_id, approve=False)
    assert no.json()["state"] == "denied"
    late = decide(login(runtime, "U200"), request_id, approve=True)
    assert late.status_code == 409
    assert SharingRequest.objects.get().state == "denied" and not SharingGrant.objects.exists()


def test_a_belief_rejected_about_its_subject_does_not_return_without_one(runtime: Runtime) -> None:
    """Alice rejects "Alice lives in Lisbon." as not true on her turn page; the same sentence, and a
    rewording, remembered later with no subject are refused, and recall never shows them."""
    turn = runtime.turn("dm-alice", "U200", "I live in Lisbon.")
    stored = only_result(
        remember(
            runtime, turn["turn_id"], body="Alice lives in Lisbon.", belief_type="user_model_attr", subject="speaker"
        )
    )
    asked = runtime.turn("dm-alice", "U200", "Where do I live? Lisbon?")
    item = RecallTraceItem.objects.get(trace__turn_id=asked["turn_id"], revision_id=stored["result"]["revision_id"])
    page = login(runtime, "U200").post(
        f"/turns/{asked['turn_id']}/items/{item.pk}/reject/", {"kind": "not_true", "correction": ""}
    )
    assert page.status_code in (200, 302)

    again = runtime.turn("dm-alice", "U200", "Alice lives in Lisbon, remember that.")
    for body in ("Alice lives in Lisbon.", "Alice is living in Lisbon!"):
        result = only_result(remember(runtime, again["turn_id"], body=body))  # a project fact: no subject
        assert (result["status"], result["code"]) == ("error", "rejected_belief"), result
    recalled = only_result(runtime.round(again["turn_id"], {"verb": "recall", "query": "Lisbon"}))
    assert "Lisbon" not in recalled["result"]["block"]


def test_a_memory_resting_on_two_peoples_words_needs_both_and_names_both(runtime: Runtime) -> None:
    """Learned from Bob's message and Alice's answer: both are its source actors, both are asked,
    either may correct it, and the block says it was said by both."""
    bobs = runtime.say(GROUP, "U300", "I'm moving to Oslo in March", audience=GROUP_AUDIENCE)
    turn = group_turn(runtime, "U200", "me too! we'll share a flat", loaded_message_ids=[bobs])
    result = only_result(
        remember(
            runtime,
            turn["turn_id"],
            body="Alice and Bob move to Oslo in March and will share a flat.",
            belief_type="event",
            source_message_ids=[bobs, turn_inbound(turn)],
        )
    )
    revision = MemoryRevision.objects.get(pk=result["result"]["revision_id"])
    bob, alice = runtime.actor("U300"), runtime.actor("U200")
    assert revision.source_actor_ids == [bob.pk, alice.pk]
    assert revision.evidence.filter(kind="source_message").count() == 2

    bob_user = User.objects.create_user(username="bob-login")
    UserActor.objects.create(user=bob_user, actor=bob)
    assert correction_relations(bob_user, [revision]) == {revision.pk: CorrectionRelation.SOURCE}

    recalled = only_result(runtime.round(turn["turn_id"], {"verb": "recall", "query": "Oslo flat"}))
    assert "by Bob (id U300) and Alice (id U200)" in recalled["result"]["block"]

    general = runtime.conversation("general").pk
    ask = share(runtime, turn["turn_id"], result["result"]["id"], general)
    assert [(c["actor_id"], c["role"]) for c in ask["result"]["consents"]] == [
        (bob.pk, "source"),
        (alice.pk, "source"),
    ]
    request_id = ask["result"]["request_id"]
    assert decide(login(runtime, "U200"), request_id, approve=True).json()["state"] == "pending"
    assert not SharingGrant.objects.exists()
    assert decide(login(runtime, "U300"), request_id, approve=True).json()["state"] == "approved"
    assert SharingGrant.objects.filter(revision=revision, revoked_at__isnull=True).count() == 1
