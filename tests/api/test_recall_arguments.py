"""The recall verb's ``subjects`` and ``type_hints``, through the rounds endpoint.

A memory about a subject the recall names ranks above an otherwise equal one about someone else,
and the recall returns what it would without (a memory about someone else loses nothing). Type
hints return only the hinted belief types. Neither ever shows a memory the conversation may not
see: subjects rank what is eligible, type hints narrow it. A subject is resolved like remember's,
among the turn's participants only, and the trace records both arguments.
"""

from __future__ import annotations

from typing import Any

from memory.models import RecallTrace
from memory.retrieval.query import SUBJECTS_POLICY_TAG, TYPE_HINTS_POLICY_TAG
from tests.api.conftest import Runtime

QUERY = "Lisbon office"


def results(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.json()
    return list(response.json()["results"])


def recalled(runtime: Runtime, turn_id: int, **arguments: Any) -> dict[str, Any]:
    (result,) = results(runtime.round(turn_id, {"verb": "recall", "query": QUERY, **arguments}))
    assert result["status"] == "ok", result
    return dict(result["result"])


def recalled_each(runtime: Runtime, turn_id: int, *arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """One round of recalls, one per set of arguments (a turn has few rounds)."""
    calls = [{"verb": "recall", "query": QUERY, **each} for each in arguments]
    answered = results(runtime.round(turn_id, *calls))
    assert all(r["status"] == "ok" for r in answered), answered
    return [dict(r["result"]) for r in answered]


def turn_in(runtime: Runtime, thread: str, who: str, text: str, **thread_fields: Any) -> int:
    """A turn for ``who``'s message in a thread the runtime fixture does not know."""
    message = runtime.say(thread, who, text, **thread_fields)
    body = {"conversation_id": runtime.conversation(thread).pk, "requester_actor_id": runtime.actor(who).pk}
    session = runtime.post("/api/v1/sessions", body).json()["session_id"]
    response = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": message})
    assert response.status_code == 201, response.json()
    return int(response.json()["turn_id"])


def remember(runtime: Runtime, turn_id: int, *beliefs: dict[str, Any]) -> list[int]:
    written = results(runtime.round(turn_id, *({"verb": "remember", **belief} for belief in beliefs)))
    assert all(r["status"] == "ok" for r in written), written
    return [int(r["result"]["revision_id"]) for r in written]


def ids(result: dict[str, Any]) -> list[int]:
    return [item["revision_id"] for item in result["items"]]


def test_a_memory_about_a_subject_asked_for_ranks_first_and_nothing_else_changes(runtime: Runtime) -> None:
    """Two equally matching memories, one about Alice and one about Bob: asking about either puts
    theirs first; the set is the one returned without subjects, and the other memory keeps its score."""
    setup = runtime.turn("general", "U100", "Notes on who uses the Lisbon office")
    about_alice, about_bob = remember(
        runtime,
        setup["turn_id"],
        {"body": "Keeps a spare key to the Lisbon office.", "subject": "U200", "belief_type": "user_model_attr"},
        {"body": "Waters the plants in the Lisbon office.", "subject": "U300", "belief_type": "user_model_attr"},
    )

    turn = runtime.turn("general", "U100", "Who has been at the Lisbon office?")
    plain = recalled(runtime, turn["turn_id"])
    for_bob = recalled(runtime, turn["turn_id"], subjects=["U300"])
    alice = runtime.actor("U200").pk
    for_alice = recalled(runtime, turn["turn_id"], subjects=[alice])  # an actor id, as an integer

    assert sorted(ids(plain)) == sorted(ids(for_bob)) == sorted(ids(for_alice)) == sorted([about_alice, about_bob])
    assert ids(for_bob)[0] == about_bob and ids(for_alice)[0] == about_alice
    scores = {name: {i["revision_id"]: i for i in r["items"]} for name, r in (("plain", plain), ("bob", for_bob))}
    # No penalty: the memory about Alice scores exactly what it scored when nobody was asked about.
    assert scores["bob"][about_alice]["score"] == scores["plain"][about_alice]["score"]
    assert scores["bob"][about_alice]["components"]["asked_subject"] == 0.0
    assert scores["bob"][about_bob]["components"]["asked_subject"] == 1.0
    assert scores["bob"][about_bob]["score"] > scores["plain"][about_bob]["score"]
    assert "about a subject asked for" in scores["bob"][about_bob]["reason"]


def test_type_hints_return_only_the_hinted_belief_types(runtime: Runtime) -> None:
    setup = runtime.turn("general", "U100", "Lisbon office notes")
    preference, decision, fact = remember(
        runtime,
        setup["turn_id"],
        {"body": "Prefers the quiet room of the Lisbon office.", "subject": "speaker", "belief_type": "preference"},
        {"body": "We decided to renew the Lisbon office lease.", "belief_type": "decision"},
        {"body": "The Lisbon office opens at eight.", "belief_type": "project_fact"},
    )
    turn = runtime.turn("general", "U100", "What do we know about the Lisbon office?")
    assert sorted(ids(recalled(runtime, turn["turn_id"]))) == sorted([preference, decision, fact])
    hinted = recalled(runtime, turn["turn_id"], type_hints=["decision", "preference"])
    assert sorted(ids(hinted)) == sorted([preference, decision])
    assert {item["belief_type"] for item in hinted["items"]} == {"decision", "preference"}
    assert ids(recalled(runtime, turn["turn_id"], type_hints=["event"])) == []


def test_subjects_never_show_a_memory_the_conversation_may_not_see(runtime: Runtime) -> None:
    """Bob's DM memory about himself, and a local memory about him from another project, stay out of
    #general however the recall names him; each is found where it is eligible (so it matches)."""
    dm = runtime.turn("dm-bob", "U300", "I am interviewing at the Lisbon office next week")
    interviewing = {"body": "Is interviewing at the Lisbon office.", "subject": "speaker"}
    (private,) = remember(runtime, dm["turn_id"], interviewing)
    assert private in ids(recalled(runtime, dm["turn_id"]))

    atlas = {"audience": {"kind": "workspace"}, "project": "atlas"}
    atlas_turn = turn_in(runtime, "atlas-room", "U300", "For atlas only: I run the Lisbon office build", **atlas)
    (local,) = remember(
        runtime,
        atlas_turn,
        {"body": "Runs the Lisbon office build for atlas.", "subject": "speaker", "portability": "local"},
    )
    assert local in ids(recalled(runtime, atlas_turn))

    turn = runtime.turn("general", "U100", "Anything about the Lisbon office?")
    bob = runtime.actor("U300").pk
    asked: tuple[dict[str, Any], ...] = (
        {},
        {"subjects": ["U300"]},
        {"subjects": [bob]},
        {"subjects": ["U300"], "type_hints": ["project_fact"]},
    )
    for arguments, result in zip(asked, recalled_each(runtime, turn["turn_id"], *asked), strict=True):
        assert private not in ids(result) and local not in ids(result), arguments
    # Naming Bob in the question is what admits his local memory from another project; asking
    # about him through subjects is not.
    (named,) = recalled_each(runtime, turn["turn_id"], {"query": "Bob Lisbon office build"})
    assert local in ids(named) and private not in ids(named)


def test_a_subject_outside_the_turn_is_refused_like_remembers(runtime: Runtime) -> None:
    runtime.say("dm-alice", "U200", "hello")
    turn = runtime.turn("dm-bob", "U300", "What about the Lisbon office?")
    victor = runtime.actor("U100").pk
    for subjects in (["U999"], [victor, "nobody"], [10**12]):
        (result,) = results(runtime.round(turn["turn_id"], {"verb": "recall", "query": QUERY, "subjects": subjects}))
        assert (result["status"], result["code"]) == ("error", "subject_not_participant"), result


def test_the_schema_refuses_an_unknown_type_or_a_malformed_subject(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Lisbon?")
    for arguments in (
        {"type_hints": ["opinion"]},
        {"type_hints": "preference"},
        {"subjects": "U200"},
        {"subjects": [True]},
        {"subjects": [""]},
        {"subjects": [0]},
        {"subjects": [{"actor_id": 1}]},
    ):
        response = runtime.round(turn["turn_id"], {"verb": "recall", "query": QUERY, **arguments})
        assert response.status_code == 400 and response.json()["code"] == "invalid_request", (arguments, response)


def test_the_trace_records_the_subjects_and_type_hints(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Lisbon office?")
    alice = runtime.actor("U200").pk
    result = recalled(runtime, turn["turn_id"], subjects=["U200", alice], type_hints=["preference", "event"])
    trace = RecallTrace.objects.get(pk=result["trace_id"])
    assert trace.query_hints == {"subject_ids": [alice], "type_hints": ["event", "preference"]}
    assert trace.policy_version.endswith(SUBJECTS_POLICY_TAG + TYPE_HINTS_POLICY_TAG)
    plain = RecallTrace.objects.get(pk=recalled(runtime, turn["turn_id"])["trace_id"])
    assert plain.query_hints == {"subject_ids": [], "type_hints": []}
    assert SUBJECTS_POLICY_TAG not in plain.policy_version
