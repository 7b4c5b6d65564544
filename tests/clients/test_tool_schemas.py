"""The tool definitions agree with the API: arguments generated from each tool's JSON Schema are
accepted by the rounds endpoint, and arguments the schema refuses are refused by the API (400 with a
code) with nothing changed. No definition takes an agent, audience or perspective, and a turn with
no round left offers no tools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # comes with drf-spectacular, without type stubs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from accounts.services import api_key_create
from history.models import Turn
from memory.models import MemoryEntry, MemoryOperation
from memory.tools import definitions
from memory.turns import TOOLS
from tests.factories import AgentFactory

SCHEMAS = {tool["name"]: tool["input_schema"] for tool in definitions("anthropic")}
EXAMPLES = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


class Rounds:
    """A runtime with a supply of open turns in Alice's DM, each used for up to three rounds."""

    def __init__(self) -> None:
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(agent=AgentFactory.create()).secret}")
        self.said = 0
        self.session_id = 0
        self.turn_id = 0

    def say(self, body: str) -> dict[str, Any]:
        self.said += 1
        message = {
            "connector": {"type": "slack", "name": "acme"},
            "thread": {"external_id": "D-ALICE", "audience": {"kind": "members", "readers": ["U2"]}},
            "actor": {"external_id": "U2", "display_name": "Alice"},
            "external_id": f"ts-{self.said}",
            "body": body,
            "created_at": f"2026-11-30T10:{self.said // 60 % 60:02d}:{self.said % 60:02d}Z",
            "evidence": {"method": "connector_signed"},
        }
        response = self.client.post("/api/v1/messages", {"messages": [message]}, format="json")
        assert response.status_code == 201, response.json()
        return dict(response.json()["messages"][0])

    def turn(self) -> int:
        """A turn with a round left."""
        if self.turn_id and Turn.objects.get(pk=self.turn_id).rounds_used < 3:
            return self.turn_id
        inbound = self.say("What do you remember about me?")
        if not self.session_id:
            body = {"conversation_id": inbound["conversation_id"], "requester_actor_id": inbound["actor_id"]}
            self.session_id = self.client.post("/api/v1/sessions", body, format="json").json()["session_id"]
        body = {"inbound_message_id": inbound["message_id"]}
        response = self.client.post(f"/api/v1/sessions/{self.session_id}/turns", body, format="json")
        assert response.status_code == 201, response.json()
        self.turn_id = int(response.json()["turn_id"])
        return self.turn_id

    def round(self, verb: str, arguments: dict[str, Any]) -> Any:
        call = {**arguments, "verb": verb}
        return self.client.post(f"/api/v1/turns/{self.turn()}/rounds", {"calls": [call]}, format="json")


@pytest.fixture
def rounds(db: None) -> Rounds:
    return Rounds()


def schema_accepts(schema: dict[str, Any], instance: Any) -> bool:
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(instance)


# --------------------------------------------------------------------------------------------------
# instances: Hypothesis strategies derived from the schema (the subset of JSON Schema the tool
# definitions use; anything else fails loudly). hypothesis-jsonschema would do this, but its latest
# release relies on Hypothesis internals that the pinned Hypothesis no longer has.
# --------------------------------------------------------------------------------------------------

ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8)), timezone(timedelta(hours=14))]


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    options = [_typed({**schema, "type": kind}) for kind in types]
    return st.one_of(*options).filter(lambda value: schema_accepts(schema, value))


def _typed(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = schema["type"]
    if kind == "null":
        return st.none()
    if "enum" in schema:
        return st.sampled_from([v for v in schema["enum"] if v is not None])
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low, high = schema.get("minimum"), schema.get("maximum")
        return st.floats(low, high, allow_nan=False, allow_infinity=False) | st.integers(
            int(low) if low is not None else None, int(high) if high is not None else None
        )
    if kind == "string" and schema.get("format") == "date-time":
        moments = st.datetimes(datetime(1000, 1, 2), datetime(2999, 12, 30), timezones=st.sampled_from(ZONES))
        return moments.map(lambda moment: moment.isoformat().replace("+00:00", "Z"))
    if kind == "string":
        text = st.from_regex(schema["pattern"], fullmatch=True) if "pattern" in schema else st.text()
        return text.filter(lambda value: len(value) <= schema.get("maxLength", 10**6))
    if kind == "object":
        return _object(schema)
    if kind == "array":
        items = from_schema(schema["items"])
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=schema.get("maxItems"))
    raise AssertionError(f"no strategy for {schema}")


@st.composite
def _object(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    properties, required = schema["properties"], set(schema["required"])
    optional = sorted(set(properties) - required)
    chosen = sorted(required) + [name for name in optional if draw(st.booleans())]
    while len(chosen) < schema.get("minProperties", 0):
        chosen.append(draw(st.sampled_from([name for name in optional if name not in chosen])))
    return {name: draw(from_schema(properties[name])) for name in chosen}


# --------------------------------------------------------------------------------------------------
# mutations: each turns a valid instance into one the schema refuses
# --------------------------------------------------------------------------------------------------

WRONG_TYPES: dict[str, list[Any]] = {
    "string": [5, 0.5, True, ["x"], {"x": 1}],
    "integer": ["5", 5.5, True, [5]],
    "number": ["0.5", True, [0.5]],
    "boolean": ["true", 1, 0, "yes"],
    "array": [5, "5", True, {"x": 1}],
}


@st.composite
def refused(draw: st.DrawFn, verb: str) -> dict[str, Any]:
    schema = SCHEMAS[verb]
    instance = dict(draw(from_schema(schema)))
    properties = schema["properties"]
    kinds = ["unknown", "bound"]
    if schema["required"]:
        kinds.append("missing")
    kinds += ["type", "range", "enum", "length", "pattern"]
    kind = draw(st.sampled_from(kinds))
    name = draw(st.sampled_from(sorted(properties)))
    prop = properties[name]
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    if kind == "unknown":
        instance[draw(st.sampled_from(["entry_id", "revision", "supersedes", "x"]))] = 1
    elif kind == "bound":
        # The perspective is bound from the key and the turn: no tool may take it as an argument.
        instance[draw(st.sampled_from(["agent", "agent_id", "audience", "perspective"]))] = "public"
    elif kind == "missing":
        del instance[draw(st.sampled_from(schema["required"]))]
    elif kind == "type":
        instance[name] = draw(st.sampled_from(WRONG_TYPES[types[0]]))
    elif kind == "range" and "maximum" in prop:
        instance[name] = prop["maximum"] + draw(st.sampled_from([1, 2**64]))
    elif kind == "range" and "minimum" in prop:
        instance[name] = prop["minimum"] - 1
    elif kind == "enum" and "enum" in prop:
        instance[name] = "not_a_choice"
    elif kind == "length" and "maxLength" in prop:
        instance[name] = "x" * (prop["maxLength"] + 1)
    elif kind == "pattern" and prop.get("format") != "date-time" and "pattern" in prop:
        instance[name] = "\u0000" if "u0000" in prop["pattern"] else "no match!"
    else:
        instance[name] = draw(st.sampled_from(WRONG_TYPES[types[0]]))
    return instance


# --------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", TOOLS)
def test_the_api_accepts_what_the_schema_accepts(rounds: Rounds, verb: str) -> None:
    @EXAMPLES
    @given(arguments=from_schema(SCHEMAS[verb]))
    def check(arguments: dict[str, Any]) -> None:
        response = rounds.round(verb, arguments)
        assert response.status_code == 200, (arguments, response.json())
        assert [r["verb"] for r in response.json()["results"]] == [verb]

    check()


@pytest.mark.parametrize("verb", TOOLS)
def test_the_api_refuses_what_the_schema_refuses_and_changes_nothing(rounds: Rounds, verb: str) -> None:
    turn_id = rounds.turn()

    @EXAMPLES
    @given(arguments=refused(verb))
    def check(arguments: dict[str, Any]) -> None:
        assert not schema_accepts(SCHEMAS[verb], arguments)
        entries, operations = MemoryEntry.objects.count(), MemoryOperation.objects.count()
        response = rounds.round(verb, arguments)
        assert 400 <= response.status_code < 500, (arguments, response.status_code)
        assert response.json()["code"] in ("invalid_request", "malformed_request"), response.json()
        assert Turn.objects.get(pk=turn_id).rounds_used == 0
        assert (MemoryEntry.objects.count(), MemoryOperation.objects.count()) == (entries, operations)

    check()


def test_no_tool_takes_an_agent_audience_or_perspective() -> None:
    for schema in SCHEMAS.values():
        assert schema["additionalProperties"] is False
        assert not {"agent", "agent_id", "audience", "perspective", "verb"} & set(schema["properties"])
    assert "entry_id" not in SCHEMAS["remember"]["properties"]  # remember only creates
    assert sorted(SCHEMAS) == sorted(TOOLS)


def test_both_formats_carry_the_same_definitions() -> None:
    openai = {t["function"]["name"]: t["function"] for t in definitions("openai")}
    for tool in definitions("anthropic"):
        assert openai[tool["name"]]["parameters"] == tool["input_schema"]
        assert openai[tool["name"]]["description"] == tool["description"]
    assert "before asking the user to repeat" in openai["recall"]["description"]
    assert "[m:" in openai["recall"]["description"] and "rounds" in openai["recall"]["description"]


def test_a_turn_offers_tools_until_its_last_round(rounds: Rounds) -> None:
    """Bound to a turn, the endpoint lists every tool while a round is left, and none after the last."""
    turn_id = rounds.turn()
    for used in range(3):
        listed = rounds.client.get(f"/api/v1/turns/{turn_id}/tools?provider=anthropic").json()
        assert listed["rounds_left"] == 3 - used and [t["name"] for t in listed["tools"]] == list(TOOLS)
        assert rounds.round("recall", {"query": ""}).status_code == 200
    listed = rounds.client.get(f"/api/v1/turns/{turn_id}/tools?provider=openai").json()
    assert listed == {**listed, "rounds_left": 0, "tools": []}


def test_the_endpoints_are_documented_and_refuse_an_unknown_provider(rounds: Rounds) -> None:
    schema = rounds.client.get("/api/schema/?format=json").json()
    assert {"/api/v1/tools", "/api/v1/turns/{turn_id}/tools"} <= set(schema["paths"])
    refused = rounds.client.get("/api/v1/tools?provider=gemini")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_request"
    assert rounds.client.get("/api/v1/turns/999999/tools").json()["code"] == "not_found"
    assert APIClient().get("/api/v1/tools").status_code == 401
