"""Hostile values through the HTTP API: each is refused with a 4xx and a machine-readable code before
any service or query runs, and the database is left exactly as it was.

- Types are strict in every request body, nested objects and list items included: a string field
  takes only a JSON string, an integer field only a JSON integer, a boolean only ``true``/``false``.
- Every integer the API takes is bounded to its column: ids from 1 to 2**63-1 (bigint). A body or
  query value past that is a 400; a path id past it matches no route and is a 404 like a missing row.
  The OpenAPI schema publishes the same bounds.
- The end user's ``/api/v1/me/*`` endpoints answer an agent's API key ``unauthenticated``.
- A pagination cursor the API did not issue is a 400 ``invalid_cursor``, not a 404 or a failed query.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.urls import URLPattern, get_resolver
from rest_framework.test import APIClient

from history.models import Turn
from memory.models import SharingGrant, SharingRequest
from tests.api.conftest import Runtime
from tests.writes import database_fingerprint, tables_changed

INT64_MAX = 2**63 - 1
PAST_BIGINT = [2**63, 99999999999999999999, -(2**63) - 1]


@contextmanager
def writes_nothing() -> Iterator[None]:
    before = database_fingerprint()
    yield
    assert tables_changed(before, database_fingerprint()) == []


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = dict(response.json())
    assert body["code"] == code and body["message"], body
    return body


def message(**override: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "connector": {"type": "slack", "name": "acme"},
        "thread": {"external_id": "general", "audience": {"kind": "workspace"}},
        "actor": {"external_id": "U100", "display_name": "Victor"},
        "external_id": "strict-1",
        "body": "A message.",
        "created_at": "2026-11-30T10:00:00Z",
        "evidence": {"method": "connector_signed"},
    }
    body.update(override)
    return body


def nested(path: str, value: Any) -> dict[str, Any]:
    """A valid message with ``value`` at the dotted ``path`` (``thread.audience.readers``)."""
    body = message()
    *parents, last = path.split(".")
    target = body
    for name in parents:
        target = target[name]
    target[last] = value
    return body


# --------------------------------------------------------------------------------------------------
# bigint ids in bodies
# --------------------------------------------------------------------------------------------------


def test_a_loaded_message_id_past_bigint_is_a_400_not_a_server_error(runtime: Runtime) -> None:
    """The reported case: loaded_message_ids [2**63] failed in PostgreSQL (bigint out of range) as a 500."""
    inbound = runtime.say("general", "U100", "What did we decide?")
    session = runtime.session("general", "U100")
    with writes_nothing():
        for value in PAST_BIGINT:
            response = runtime.post(
                f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound, "loaded_message_ids": [value]}
            )
            detail = refused(response, 400, "invalid_request")["detail"]
            assert list(detail["loaded_message_ids"]) == ["0"], detail
    assert not Turn.objects.exists()
    # The largest bigint is a well-formed id: it reaches the service, which knows no such message.
    largest = runtime.post(
        f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound, "loaded_message_ids": [INT64_MAX]}
    )
    refused(largest, 422, "unknown_parent")


@pytest.mark.parametrize("value", [*PAST_BIGINT, 0, -1])
@pytest.mark.parametrize(
    "field", ["conversation_id", "requester_actor_id", "parent_session_id"], ids=lambda f: f.removesuffix("_id")
)
def test_session_ids_outside_1_to_2_63_minus_1_are_refused(runtime: Runtime, field: str, value: int) -> None:
    body = {"conversation_id": runtime.conversation("general").pk, field: value}
    with writes_nothing():
        detail = refused(runtime.post("/api/v1/sessions", body), 400, "invalid_request")["detail"]
    assert field in detail, detail


def test_an_inbound_message_id_past_bigint_is_refused(runtime: Runtime) -> None:
    session = runtime.session("general", "U100")
    with writes_nothing():
        response = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": 2**63})
        assert "inbound_message_id" in refused(response, 400, "invalid_request")["detail"]


@pytest.mark.parametrize(
    "call",
    [
        {"verb": "amend", "id": "m:8000000000000000", "body": "x"},
        {"verb": "forget", "id": "m:ffffffffffffffff"},
        {"verb": "request_memory_sharing", "id": "m:8000000000000000", "conversation_id": 1},
        {"verb": "request_memory_sharing", "id": "m:0000002a", "conversation_id": 2**63},
        {"verb": "remember", "body": "x", "subject_actor_id": 2**63},
        {"verb": "search_history", "query": "x", "conversation_id": 0},
    ],
    ids=["amend-id", "forget-id", "share-id", "share-conversation", "remember-subject", "search-conversation"],
)
def test_memory_ids_and_ids_in_verbs_past_bigint_refuse_the_round(runtime: Runtime, call: dict[str, Any]) -> None:
    turn = runtime.turn("general", "U100", "Note this down.")
    with writes_nothing():
        refused(runtime.round(turn["turn_id"], call), 400, "invalid_request")


def test_the_largest_memory_id_is_well_formed_and_unknown(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Forget that.")
    result = runtime.round(turn["turn_id"], {"verb": "forget", "id": "m:7fffffffffffffff"}).json()["results"][0]
    assert (result["status"], result["code"]) == ("unchanged", "unknown_memory")


def test_a_cited_memory_id_past_bigint_is_refused_and_the_turn_stays_open(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Thanks!")
    with writes_nothing():
        refused(
            runtime.reply(turn["turn_id"], "You're welcome.", cited_ids=["m:ffffffffffffffff"]), 400, "invalid_request"
        )
    assert runtime.reply(turn["turn_id"], "You're welcome.").status_code == 201


@pytest.mark.parametrize(
    "query",
    ["subject_actor_id=9223372036854775808", "source_actor_id=99999999999999999999", "source_actor_id=0"],
)
def test_query_ids_outside_bigint_are_refused(runtime: Runtime, query: str) -> None:
    manager = runtime.manager()
    with writes_nothing():
        refused(manager.get(f"/api/v1/memories?{query}"), 400, "invalid_request")
    assert manager.get("/api/v1/memories?subject_actor_id=9223372036854775807").status_code == 200


# --------------------------------------------------------------------------------------------------
# ids in paths
# --------------------------------------------------------------------------------------------------

#: A valid body for each POST route with an id in its path, so that only the id can be what is refused.
POST_BODIES: dict[str, dict[str, Any]] = {
    "turns-create": {"inbound_message_id": 1},
    "turns-rounds": {"calls": [{"verb": "recall", "query": "x"}]},
    "turns-reply": {"body": "Hello."},
    "me-sharing-decision": {"approve": True},
    "me-grants-revoke": {},
}


def api_routes_with_ids() -> list[tuple[str, str, str]]:
    """(name, route, method) of every /api/v1 route taking an id in its path."""
    routes = []
    for pattern in get_resolver().url_patterns:
        route = str(pattern.pattern)
        if isinstance(pattern, URLPattern) and route.startswith("api/v1/") and "<" in route:
            view = getattr(pattern.callback, "view_class", None)
            method = "post" if hasattr(view, "post") else "get"
            routes.append((pattern.name or route, route, method))
    return routes


def test_every_id_in_an_api_path_is_a_bounded_id() -> None:
    routes = api_routes_with_ids()
    assert len(routes) >= 10
    for name, route, method in routes:
        # A memory's path takes its m: id or its entry id, within the same bounds (MemoryIdConverter).
        assert "<int:" not in route and ("<id:" in route or "<memory:" in route), route
        assert method == "get" or name in POST_BODIES, f"add a valid body for {name}"


@pytest.mark.parametrize(
    "value",
    ["99999999999999999999", str(2**63), str(INT64_MAX), "0", "-1", "00", "m:8000000000000000", "m:7fffffffffffffff"],
)
def test_a_path_id_outside_bigint_or_unknown_answers_404_not_found(
    runtime: Runtime, alice_browser: APIClient, value: str
) -> None:
    """Out of range, the id matches no route; the largest bigint reaches the lookup and finds nothing."""
    manager = runtime.manager()
    with writes_nothing():
        for name, route, method in api_routes_with_ids():
            client = alice_browser if route.startswith("api/v1/me/") else runtime.client
            if route.startswith("api/v1/memories"):
                client = manager.client
            path = "/" + route.split("<", 1)[0] + value + route.split(">", 1)[1]
            body = POST_BODIES.get(name) if method == "post" else None
            response = getattr(client, method)(path, body, format="json")
            assert response.status_code == 404, (name, value, response.status_code, response.content[:300])
            assert response.json()["code"] == "not_found", (name, value, response.json())


# --------------------------------------------------------------------------------------------------
# strict JSON types
# --------------------------------------------------------------------------------------------------


def ingest(runtime: Runtime, item: dict[str, Any]) -> Any:
    return runtime.post("/api/v1/messages", {"messages": [item]})


#: (what is sent, how, and where the error detail names it)
WRONG_TYPES: list[tuple[str, Callable[[Runtime], Any], list[str]]] = [
    ("ingest body: integer", lambda r: ingest(r, message(body=12345)), ["messages", "0", "body"]),
    ("ingest body: list", lambda r: ingest(r, message(body=["hi"])), ["messages", "0", "body"]),
    ("ingest external_id: integer", lambda r: ingest(r, message(external_id=7)), ["messages", "0", "external_id"]),
    (
        "ingest created_at: integer",
        lambda r: ingest(r, message(created_at=1_700_000_000)),
        ["messages", "0", "created_at"],
    ),
    (
        "ingest display_name: boolean",
        lambda r: ingest(r, nested("actor.display_name", True)),
        ["messages", "0", "actor", "display_name"],
    ),
    (
        "ingest thread id: integer, nested",
        lambda r: ingest(r, nested("thread.external_id", 5)),
        ["messages", "0", "thread", "external_id"],
    ),
    (
        "ingest reader: integer, a list item",
        lambda r: ingest(r, nested("thread.audience", {"kind": "members", "readers": ["U100", 200]})),
        ["messages", "0", "thread", "audience", "readers", "1"],
    ),
    (
        "ingest evidence method: integer for a choice",
        lambda r: ingest(r, nested("evidence.method", 1)),
        ["messages", "0", "evidence", "method"],
    ),
    (
        "session conversation_id: string",
        lambda r: r.post("/api/v1/sessions", {"conversation_id": "1"}),
        ["conversation_id"],
    ),
    (
        "session conversation_id: boolean",
        lambda r: r.post("/api/v1/sessions", {"conversation_id": True}),
        ["conversation_id"],
    ),
    (
        "session conversation_id: fraction",
        lambda r: r.post("/api/v1/sessions", {"conversation_id": 1.5}),
        ["conversation_id"],
    ),
    ("session goal: object", lambda r: r.post("/api/v1/sessions", {"conversation_id": 1, "goal": {"a": 1}}), ["goal"]),
    (
        "session kind: integer for a choice",
        lambda r: r.post("/api/v1/sessions", {"conversation_id": 1, "kind": 0}),
        ["kind"],
    ),
]


@pytest.mark.parametrize(("what", "send", "where"), WRONG_TYPES, ids=[w for w, _, _ in WRONG_TYPES])
def test_a_value_of_the_wrong_json_type_is_refused_and_nothing_is_stored(
    runtime: Runtime, what: str, send: Callable[[Runtime], Any], where: list[str]
) -> None:
    """The reported case among them: an integer message body was accepted and stored as text."""
    with writes_nothing():
        detail = refused(send(runtime), 400, "invalid_request")["detail"]
    found = detail
    for key in where:
        found = found[key]
    assert found and all(isinstance(m, str) for m in found), detail


@pytest.mark.parametrize(
    "turn_body",
    [
        {"inbound_message_id": "1"},
        {"inbound_message_id": True},
        {"loaded_message_ids": ["1"]},
        {"loaded_message_ids": "1"},
        {"loaded_message_ids": [None]},
        {"loaded_message_ids": [[1]]},
    ],
    ids=["inbound:string", "inbound:boolean", "window-item:string", "window:string", "window-item:null", "nested-list"],
)
def test_turn_ids_take_only_json_integers(runtime: Runtime, turn_body: dict[str, Any]) -> None:
    inbound = runtime.say("general", "U100", "Anything new?")
    session = runtime.session("general", "U100")
    with writes_nothing():
        response = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": inbound, **turn_body})
        detail = refused(response, 400, "invalid_request")["detail"]
    assert set(detail) == set(turn_body), detail


@pytest.mark.parametrize(
    "reply", [{"body": 5}, {"body": True}, {"body": None}, {"body": "ok", "cited_ids": [42]}, {"body": {"text": "ok"}}]
)
def test_a_reply_takes_only_a_json_string_body(runtime: Runtime, reply: dict[str, Any]) -> None:
    """The reported case: an integer reply body was delivered and stored as text."""
    turn = runtime.turn("general", "U100", "Hello?")
    with writes_nothing():
        refused(runtime.post(f"/api/v1/turns/{turn['turn_id']}/reply", reply), 400, "invalid_request")
    assert Turn.objects.get(pk=turn["turn_id"]).reply_id is None


@pytest.mark.parametrize(
    "call",
    [
        {"verb": "remember", "body": 5},
        {"verb": "remember", "body": "x", "always_on": "true"},
        {"verb": "remember", "body": "x", "confidence": "0.5"},
        {"verb": "recall", "query": "x", "max_items": True},
        {"verb": "search_history", "query": ["x"]},
    ],
)
def test_verb_arguments_take_only_their_json_types(runtime: Runtime, call: dict[str, Any]) -> None:
    turn = runtime.turn("general", "U100", "Remember this.")
    with writes_nothing():
        refused(runtime.round(turn["turn_id"], call), 400, "invalid_request")


def test_a_round_refuses_unknown_keys_beside_its_calls(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Remember this.")
    with writes_nothing():
        response = runtime.post(
            f"/api/v1/turns/{turn['turn_id']}/rounds", {"calls": [{"verb": "recall", "query": "x"}], "final": True}
        )
        assert refused(response, 400, "invalid_request")["detail"] == {"final": ["unknown field"]}


def test_an_integral_number_is_an_integer(runtime: Runtime) -> None:
    """JSON has one number type: 1.0 is the integer 1 (as JSON Schema's ``integer`` says); 1.5 is not."""
    response = runtime.post("/api/v1/sessions", {"conversation_id": float(runtime.conversation("general").pk)})
    assert response.status_code == 201, response.json()


def test_a_number_too_large_for_a_double_in_a_free_form_field_is_malformed(runtime: Runtime) -> None:
    """``1e400`` parses as infinity, which jsonb cannot store: refused up front, not a failed insert."""
    raw = json.dumps({"messages": [message()]}).replace(
        '"connector_signed"', '"connector_signed", "detail": {"n": 1e400}'
    )
    with writes_nothing():
        response = runtime.client.generic("POST", "/api/v1/messages", raw, content_type="application/json")
        refused(response, 400, "malformed_request")


# --------------------------------------------------------------------------------------------------
# the end user's endpoints
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def sharing(runtime: Runtime, alice_browser: APIClient) -> dict[str, int]:
    """A pending sharing request and a live grant of Alice's, decided by Alice herself."""
    turn = runtime.turn("dm-alice", "U200", "The launch is March 3.")
    made = runtime.round(turn["turn_id"], {"verb": "remember", "body": "The launch is on March 3."})
    memory_id = made.json()["results"][0]["result"]["id"]
    general = runtime.conversation("general").pk
    ask = {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general}
    first = runtime.round(turn["turn_id"], ask).json()["results"][0]["result"]["request_id"]
    decided = alice_browser.post(f"/api/v1/me/sharing-requests/{first}/decision", {"approve": True}, format="json")
    assert decided.status_code == 200, decided.json()
    second = runtime.turn("dm-alice", "U200", "Any news?")
    pending = runtime.round(second["turn_id"], ask).json()["results"][0]["result"]["request_id"]
    return {"request_id": pending, "grant_id": decided.json()["grant_id"]}


def me_calls(sharing: dict[str, int]) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("get", "/api/v1/me/sharing-requests", None),
        ("post", f"/api/v1/me/sharing-requests/{sharing['request_id']}/decision", {"approve": True}),
        ("post", f"/api/v1/me/grants/{sharing['grant_id']}/revoke", {}),
    ]


def test_an_agent_key_on_the_end_users_endpoints_is_unauthenticated(runtime: Runtime, sharing: dict[str, int]) -> None:
    """These endpoints are for a person signed in to Engram: an agent's valid API key is no credential
    here, so it is refused as ``unauthenticated`` (403: session login has no challenge to send)."""
    anonymous = APIClient()
    with writes_nothing():
        for client in (runtime.client, anonymous):
            for method, path, body in me_calls(sharing):
                response = getattr(client, method)(path, body, format="json")
                assert "sign in" in refused(response, 403, "unauthenticated")["message"]
    assert SharingRequest.objects.get(pk=sharing["request_id"]).state == "pending"
    assert SharingGrant.objects.get(pk=sharing["grant_id"]).revoked_at is None


def test_a_decision_takes_only_a_json_boolean(alice_browser: APIClient, sharing: dict[str, int]) -> None:
    path = f"/api/v1/me/sharing-requests/{sharing['request_id']}/decision"
    with writes_nothing():
        for approve in ("true", 1, "yes", None, [True]):
            refused(alice_browser.post(path, {"approve": approve}, format="json"), 400, "invalid_request")
    assert SharingRequest.objects.get(pk=sharing["request_id"]).state == "pending"


def test_a_person_who_is_signed_in_still_decides(alice_browser: APIClient, sharing: dict[str, int]) -> None:
    for response in (
        alice_browser.get("/api/v1/me/sharing-requests"),
        alice_browser.post(f"/api/v1/me/grants/{sharing['grant_id']}/revoke", format="json"),
    ):
        assert response.status_code == 200, response.json()


# --------------------------------------------------------------------------------------------------
# pagination cursors
# --------------------------------------------------------------------------------------------------


def encoded(querystring: bytes) -> str:
    return base64.b64encode(querystring).decode("ascii")


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "%%%",
        encoded(b"o=abc"),
        encoded(b"r=x"),
        encoded(b"p=99999999999999999999"),
        encoded(b"p=not-a-date"),
        encoded(b"p=2026-11-30+10%3A00%3A00%00"),
        encoded("p=é".encode()),
    ],
)
def test_a_cursor_the_api_did_not_issue_is_a_400_invalid_cursor(runtime: Runtime, cursor: str) -> None:
    manager = runtime.manager()
    with writes_nothing():
        body = refused(manager.client.get("/api/v1/memories", {"cursor": cursor}), 400, "invalid_cursor")
    assert "cursor" in body["message"]


def test_an_issued_cursor_reads_the_next_page(runtime: Runtime) -> None:
    turn = runtime.turn("general", "U100", "Remember two things.")
    runtime.round(turn["turn_id"], {"verb": "remember", "body": "One."}, {"verb": "remember", "body": "Two."})
    manager = runtime.manager()
    first = manager.get("/api/v1/memories?page_size=1").json()
    second = manager.get(first["next"]).json()
    assert [len(first["results"]), len(second["results"])] == [1, 1]
    assert first["results"][0]["id"] != second["results"][0]["id"]


# --------------------------------------------------------------------------------------------------
# the published schema
# --------------------------------------------------------------------------------------------------


def integers_taken(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, schema) of every integer a request can carry: request body properties (and their list
    items; nested objects are request components of their own) and query and path parameters."""
    for component, body in schema["components"]["schemas"].items():
        if component.endswith("Request"):
            for name, field in body.get("properties", {}).items():
                for node in (field, field.get("items", {})):
                    if node.get("type") == "integer":
                        yield f"{component}.{name}", node
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["schema"].get("type") == "integer":
                    yield f"{method.upper()} {path} {parameter['name']}", parameter["schema"]


def test_every_integer_the_api_takes_is_bounded_in_the_schema(db: None) -> None:
    """Request bodies, query and path parameters: each integer has a minimum and a maximum within int64,
    and each id (``…_id``, items of ``…_ids``) starts at 1."""
    taken = list(integers_taken(APIClient().get("/api/schema/?format=json").json()))
    assert len(taken) >= 25
    for where, integer in taken:
        assert "minimum" in integer and "maximum" in integer, where
        assert -(2**63) <= integer["minimum"] <= integer["maximum"] <= INT64_MAX, where
        if where.endswith(("_id", "_ids")):
            assert integer["minimum"] >= 1, where


def test_path_ids_are_bounded_in_the_schema(db: None) -> None:
    """Every id in a path is a bounded int64, except a memory's, which is text of a bounded form: its
    ``m:`` id (at most 16 hex digits) or its entry id (at most 19 digits)."""
    schema = APIClient().get("/api/schema/?format=json").json()
    ids = {
        (path, parameter["name"]): parameter["schema"]
        for path, operations in schema["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path"
    }
    memory = ids.pop(("/api/v1/memories/{memory_id}", "memory_id"))
    assert memory == {"type": "string", "pattern": "^(m:[0-9a-fA-F]{1,16}|[0-9]{1,19})$"}
    assert len(ids) >= 10
    assert all(s == {"type": "integer", "format": "int64", "minimum": 1, "maximum": INT64_MAX} for s in ids.values()), (
        ids
    )
