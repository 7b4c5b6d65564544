"""Property-based tests of every operation in the published OpenAPI schema, with Schemathesis.

The schema is loaded from the Django application in-process (``/api/schema/``) and every operation is
called through the real WSGI handler with generated requests, valid and invalid (positive and negative
generation modes). Each response must not be a server error and must conform to the schema: a documented
status code, the documented content type and headers, and a body matching the documented shape.

Authentication is real: the agent runtime endpoints get a Bearer API key of a seeded agent; the
``/api/v1/me/*`` end-user endpoints get the Django session cookie (and CSRF token) of a logged-in person
whose actor the agent has heard from. A seeded world (conversations, sessions, turns, messages, traces,
memories, sharing requests, grants) lets path and body ids name existing objects part of the time, so
the cases reach past "404 not found" into the services.

Every refused request (4xx) must also have written nothing: each table's rows are fingerprinted
before the call and compared after it (tests/writes.py).

A second, deterministic pass sends hostile values to every field of every operation: each body field
(nested objects and list items included), query parameter and path parameter of a valid request is
replaced in turn by the int64 edges (2**63-1, 2**63, -2**63-1, 0, -1) and by each wrong JSON type (a
string, a boolean, null, a list, an object; an integer for a string). Whatever the schema refuses, the
API must refuse: 400 for a body or query value, 404 for a path id; and never a 5xx or a write.

Generation is deterministic (``derandomize``) and bounded per operation and mode. The test runs on
``transactional_db``: the WSGI handler closes connections whose autocommit differs from the settings at
the end of each request, as production does, so the cases cannot run inside the test transaction.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # comes with drf-spectacular, without type stubs
import pytest
import schemathesis
from django.contrib.auth.models import User
from django.utils.crypto import get_random_string
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from schemathesis.core import NOT_SET
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.schemas import APIOperation

from accounts.models import ApiScope, UserActor
from accounts.services import api_key_create
from memory.models import MemoryEntry, SharingGrant, SharingRequest
from tests.api.conftest import Runtime
from tests.factories import AgentFactory
from tests.writes import WriteWatch

#: Generated cases per operation and generation mode: 16 operations x 2 modes x 30, with the write
#: check on each, take about 40 s on two cores; the hostile-value pass below about 20 s more.
MAX_EXAMPLES = 30
#: Cases per mode for the end-user endpoints called without the person's session.
OUTSIDERS = 5
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    # Failures are collected, not raised: shrinking would never start and the explicit phase has no examples.
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


# --------------------------------------------------------------------------------------------------
# the seeded world
# --------------------------------------------------------------------------------------------------


@dataclass
class World:
    """Ids that exist, by the parameter or body field that names them, and the two credentials."""

    agent_headers: dict[str, str]
    user_cookies: dict[str, str]
    user_headers: dict[str, str]
    ids: dict[str, list[Any]] = field(default_factory=dict)


NAMES = {"U100": "Victor", "U200": "Alice", "U300": "Bob"}
THREADS: dict[str, dict[str, Any]] = {
    "general": {"kind": "workspace"},
    "dm-alice": {"kind": "members", "readers": ["U200"]},
}


def seed_world() -> World:
    """An agent that heard Victor, Alice and Bob in #general and Alice's DM, with turns in both, a few
    memories, a pending and an approved sharing request (so a grant), and Alice logged in as herself."""
    agent = AgentFactory.create()
    secret = api_key_create(agent=agent, scopes=ApiScope.values).secret  # every agent operation, manage included
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    runtime = Runtime(agent=agent, client=client)

    messages = [runtime.say(thread, who, f"{name} says hello") for thread in THREADS for who, name in NAMES.items()]
    turns, traces, memories = [], [], []
    for thread, who, text in (
        ("dm-alice", "U200", "I like oolong tea and the launch is on March 3."),
        ("general", "U300", "When is the launch?"),
        ("general", "U100", "Deploys freeze on Fridays."),
        ("dm-alice", "U200", "Please remember I moved to Lisbon."),
    ):
        turn = runtime.turn(thread, who, text)
        turns.append(turn["turn_id"])
        traces.append(turn["recall"]["trace_id"])
        made = runtime.round(turn["turn_id"], {"verb": "remember", "body": text}).json()
        memories.append(made["results"][0]["result"]["id"])

    alice = User.objects.create_user(username="alice", password="not-used")
    UserActor.objects.create(user=alice, actor=runtime.actor("U200"))
    general = runtime.conversation("general").pk
    for memory in memories[:2]:
        runtime.round(turns[0], {"verb": "request_memory_sharing", "id": memory, "conversation_id": general})
    browser = APIClient()
    browser.force_login(alice)
    approved = SharingRequest.objects.order_by("pk").first()
    assert approved is not None
    csrf = get_random_string(32)
    user_cookies = {"sessionid": browser.cookies["sessionid"].value, "csrftoken": csrf}
    browser.cookies["csrftoken"] = csrf
    decided = browser.post(
        f"/api/v1/me/sharing-requests/{approved.pk}/decision", {"approve": True}, format="json", HTTP_X_CSRFTOKEN=csrf
    )
    assert decided.status_code == 200, decided.json()

    sessions = sorted({runtime.session(thread, who) for thread in THREADS for who in ("U200", "U300")})
    actors = [runtime.actor(who).pk for who in NAMES]
    conversations = [runtime.conversation(thread).pk for thread in THREADS]
    return World(
        agent_headers={"Authorization": f"Bearer {secret}"},
        user_cookies=user_cookies,
        user_headers={"X-CSRFToken": csrf},
        ids={
            "session_id": sessions,
            "parent_session_id": sessions,
            "turn_id": turns,
            "trace_id": traces,
            "conversation_id": conversations,
            "requester_actor_id": actors,
            "subject_actor_id": actors,
            "inbound_message_id": messages,
            "loaded_message_ids": messages,
            "id": memories,
            "cited_ids": memories,
            "request_id": list(SharingRequest.objects.order_by("pk").values_list("pk", flat=True)),
            "grant_id": list(SharingGrant.objects.order_by("pk").values_list("pk", flat=True)),
            "entry_id": list(MemoryEntry.objects.filter(agent=agent).order_by("pk").values_list("pk", flat=True)),
            "memory_id": memories,
        },
    )


# --------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------


def seeded_cases(operation: APIOperation, mode: GenerationMode, world: World) -> st.SearchStrategy[Any]:
    """Generated cases in which each path id and each id-valued body field names a seeded object about
    half of the time (and is left as generated otherwise)."""

    @st.composite
    def build(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
        fixed = {}
        for parameter in operation.path_parameters:
            pool = world.ids.get(parameter.name)
            if pool and draw(st.booleans()):
                fixed[parameter.name] = draw(st.sampled_from(pool))
        case = draw(operation.as_strategy(mode, path_parameters=fixed or None))
        if isinstance(case.body, dict | list):
            case.body = remap(case.body, world, draw)
        return case

    return build()


def remap(value: Any, world: World, draw: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
    """``value`` with id-valued fields of the right type swapped, on a coin toss, for seeded ids."""
    if isinstance(value, list):
        return [remap(item, world, draw) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        pool = world.ids.get(key)
        if pool and isinstance(item, list) and all(isinstance(x, type(pool[0])) for x in item):
            out[key] = [draw(st.sampled_from(pool)) if draw(st.booleans()) else x for x in item]
        elif pool and isinstance(item, type(pool[0])) and not isinstance(item, bool) and draw(st.booleans()):
            out[key] = draw(st.sampled_from(pool))
        else:
            out[key] = remap(item, world, draw)
    return out


@dataclass
class Tally:
    cases: int = 0
    failures: int = 0
    by_operation: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    reports: dict[tuple[str, str], str] = field(default_factory=dict)
    #: Positive cases (valid by the schema) that the API refused as invalid: a schema looser than the API.
    refused: Counter[str] = field(default_factory=Counter)
    refusal_samples: dict[str, str] = field(default_factory=dict)
    #: The tables each case changed (started once the world is seeded).
    writes: WriteWatch | None = None

    def wrote(self, label: str, status: int, changed: list[str], sent: str) -> None:
        """Record a refused request that changed tables."""
        self.failures += 1
        self.reports.setdefault((label, f"{status} wrote {changed}"), sent)


@dataclass(frozen=True)
class Identity:
    """Who sends a case: the credentials it carries."""

    name: str
    headers: dict[str, str]
    cookies: dict[str, str] | None = None


def identities(operation: APIOperation, world: World) -> list[tuple[Identity, int]]:
    """The identities an operation is called as, with how many cases each gets. The end-user endpoints
    are called as the logged-in person (session cookie and CSRF token), and briefly as an anonymous
    browser and as an agent's API key, which they must refuse with a documented status."""
    agent = Identity("agent", world.agent_headers)
    if not operation.path.startswith("/api/v1/me/"):
        return [(agent, MAX_EXAMPLES)]
    person = Identity("person", world.user_headers, world.user_cookies)
    return [(person, MAX_EXAMPLES), (Identity("anonymous", {}), OUTSIDERS), (agent, OUTSIDERS)]


def run_operation(
    operation: APIOperation, mode: GenerationMode, identity: Identity, examples: int, world: World, tally: Tally
) -> None:
    """Call ``operation`` with generated cases and collect, rather than raise, every failed check."""

    @settings(SETTINGS, max_examples=examples)
    @given(case=seeded_cases(operation, mode, world))
    def call(case: Any) -> None:
        tally.cases += 1
        tally.by_operation[operation.label] += 1
        response = case.call(headers=identity.headers, cookies=identity.cookies)
        tally.statuses.setdefault(f"{operation.label} as {identity.name}", Counter())[response.status_code] += 1
        assert tally.writes is not None
        changed = tally.writes.changed()
        if 400 <= response.status_code < 500 and changed:
            label = f"{operation.label} as {identity.name}"
            tally.wrote(label, response.status_code, changed, f"[{mode.value}] {case.body!r:.300}")
        if mode is GenerationMode.POSITIVE and response.status_code == 400:
            tally.refused[operation.label] += 1
            tally.refusal_samples.setdefault(operation.label, f"{case.body!r:.300} -> {response.text:.300}")
        try:
            case.validate_response(response, checks=CHECKS, headers=identity.headers)
        except FailureGroup as group:
            tally.failures += 1
            for failure in group.exceptions:
                key = (f"{operation.label} as {identity.name}", failure.title)
                tally.reports.setdefault(key, f"[{mode.value}] {group.message}")

    call()


def operations(schema: Any) -> Iterator[APIOperation]:
    for result in schema.get_all_operations():
        yield result.ok()


@pytest.fixture
def schema() -> Any:
    from config.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/", application)


def test_every_operation_answers_within_its_schema(transactional_db: None, schema: Any) -> None:
    """Generated requests to every operation, as an agent or as a logged-in person, never get a 5xx,
    always get a documented status, content type and body, and when refused have written nothing."""
    world = seed_world()
    tally = Tally(writes=WriteWatch())
    for operation in operations(schema):
        for identity, examples in identities(operation, world):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                run_operation(operation, mode, identity, examples, world, tally)

    for label, statuses in sorted(tally.statuses.items()):
        print(f"{label}: {dict(sorted(statuses.items()))}")
    for label, count in sorted(tally.refused.items()):
        print(f"{label}: {count} schema-valid requests refused with 400, e.g. {tally.refusal_samples[label]}")
    for (label, title), report in sorted(tally.reports.items()):
        print(f"\n--- {label}: {title}\n{report}")
    print(
        f"\nschemathesis: {tally.cases} cases across {len(tally.by_operation)} operations, "
        f"{tally.failures} failures ({len(tally.reports)} distinct)"
    )
    assert len(tally.by_operation) == len(list(operations(schema)))
    assert tally.failures == 0, sorted(tally.reports)


# --------------------------------------------------------------------------------------------------
# hostile values in every field
# --------------------------------------------------------------------------------------------------

INT64_EDGES: list[Any] = [2**63 - 1, 2**63, -(2**63) - 1, 0, -1]
#: A wrong JSON type for every field: a string (for an integer), a boolean, null, a list, an object;
#: the integers above are the wrong type for a string.
WRONG_TYPES: list[Any] = ["7", True, None, [1], {"k": 1}]
HOSTILE = INT64_EDGES + WRONG_TYPES
#: The same, as they arrive in a path or a query string.
HOSTILE_TEXT = [str(v) for v in INT64_EDGES] + ["seven", "true", "null", "[1]", "{}", ""]


def valid_bodies(world: World) -> dict[str, list[Any]]:
    """A valid request body per operation that takes one (a round: one per verb), so that the value
    put into a field is the only thing that can be wrong with it."""
    ids = world.ids
    memory, conversation = ids["id"][0], ids["conversation_id"][0]
    message = {
        "connector": {"type": "slack", "name": "acme"},
        "thread": {
            "external_id": "fuzz",
            "title": "",
            "project": "",
            "audience": {"kind": "members", "readers": ["U200"]},
        },
        "actor": {"external_id": "U200", "display_name": "Alice"},
        "external_id": "fuzz-1",
        "body": "Hello from the fuzzer.",
        "created_at": "2026-11-30T10:00:00Z",
        "evidence": {"method": "connector_signed", "detail": {}},
    }
    calls = [
        {"verb": "remember", "body": "The fuzzer was here."},
        {"verb": "recall", "query": "fuzzer"},
        {"verb": "amend", "id": memory, "body": "The fuzzer was here twice."},
        {"verb": "forget", "id": memory},
        {"verb": "request_memory_sharing", "id": memory, "conversation_id": conversation},
        {"verb": "search_history", "query": "hello"},
    ]
    return {
        "POST /api/v1/messages": [{"messages": [message]}],
        "POST /api/v1/sessions": [
            {"conversation_id": conversation, "requester_actor_id": ids["requester_actor_id"][0]}
        ],
        "POST /api/v1/sessions/{session_id}/turns": [
            {"inbound_message_id": ids["inbound_message_id"][0], "loaded_message_ids": [ids["inbound_message_id"][1]]}
        ],
        "POST /api/v1/turns/{turn_id}/rounds": [{"calls": [call]} for call in calls],
        "POST /api/v1/turns/{turn_id}/reply": [{"body": "Thanks.", "cited_ids": [memory]}],
        "POST /api/v1/me/sharing-requests/{request_id}/decision": [{"approve": False}],
    }


def resolve(node: dict[str, Any], raw: dict[str, Any], value: Any = None) -> dict[str, Any]:
    """``node`` with references followed; a one-element ``allOf`` unwrapped; a discriminated ``oneOf``
    narrowed to the branch ``value`` names."""
    while True:
        if "$ref" in node:
            node = {
                **raw["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]],
                **{k: v for k, v in node.items() if k != "$ref"},
            }
        elif len(node.get("allOf", [])) == 1:
            node = {**resolve(node["allOf"][0], raw), **{k: v for k, v in node.items() if k != "allOf"}}
        elif "discriminator" in node and isinstance(value, dict):
            node = {"$ref": node["discriminator"]["mapping"][value[node["discriminator"]["propertyName"]]]}
        else:
            return node


def json_schema(node: Any, raw: dict[str, Any]) -> Any:
    """An OpenAPI 3.0 schema as plain JSON Schema, references inlined and ``nullable`` as a type."""
    if isinstance(node, list):
        return [json_schema(item, raw) for item in node]
    if not isinstance(node, dict):
        return node
    node = resolve(node, raw)
    plain = {key: json_schema(child, raw) for key, child in node.items() if key not in ("nullable", "discriminator")}
    return {"anyOf": [plain, {"type": "null"}]} if node.get("nullable") else plain


def body_fields(
    node: dict[str, Any], value: Any, raw: dict[str, Any]
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path, schema) of every field of a body: each property, the first item of each list, and the
    fields of nested objects and list items the valid body has."""
    node = resolve(node, raw, value)
    for name, schema in node.get("properties", {}).items():
        child = value.get(name) if isinstance(value, dict) else None
        schema = resolve(schema, raw, child)
        yield (name,), schema
        if isinstance(child, dict):
            for path, inner in body_fields(schema, child, raw):
                yield (name, *path), inner
        if schema.get("type") == "array" and isinstance(child, list) and child:
            item = resolve(schema["items"], raw, child[0])
            yield (name, 0), item
            if isinstance(child[0], dict):
                for path, inner in body_fields(item, child[0], raw):
                    yield (name, 0, *path), inner


def replaced(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(body)
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copied


def integer_text_valid(text: str, schema: dict[str, Any]) -> bool:
    try:
        number = int(text)
    except ValueError:
        return False
    return text == str(number) and schema.get("minimum", number) <= number <= schema.get("maximum", number)


def path_text_valid(text: str, schema: dict[str, Any]) -> bool:
    """A path parameter is an integer id within its bounds or, where the schema says text (a memory's
    ``m:`` id or entry id), text its pattern matches."""
    if schema.get("type") == "string":
        return re.search(schema.get("pattern", ""), text) is not None
    return integer_text_valid(text, schema)


@dataclass
class Probe:
    """One request with one hostile value: where it went, and the status the schema demands (None: any
    but a 5xx)."""

    where: str
    path_parameters: dict[str, Any]
    query: dict[str, Any]
    body: Any
    expected: int | None


def probes(operation: APIOperation, raw: dict[str, Any], world: World, bodies: dict[str, list[Any]]) -> Iterator[Probe]:
    definition = raw["paths"][operation.path][operation.method.lower()]
    parameters = definition.get("parameters", [])
    path_ids = {p["name"]: world.ids[p["name"]][0] for p in parameters if p["in"] == "path"}
    bases = bodies.get(operation.label, [None])
    body_schema = definition.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    assert body_schema is None or bases != [None], f"add a valid body for {operation.label}"
    for base in bases:
        if base is None:
            continue
        for path, schema in body_fields(body_schema, base, raw):
            validator = jsonschema.Draft7Validator(json_schema(schema, raw))
            for value in HOSTILE:
                where = ".".join(str(p) for p in path)
                if path[0] == "calls":
                    where = f"{base['calls'][0]['verb']}:{where}"
                expected = None if validator.is_valid(value) else 400
                yield Probe(f"body {where}={value!r}", path_ids, {}, replaced(base, path, value), expected)
    base = bases[0]
    for parameter in parameters:
        schema = resolve(parameter["schema"], raw)
        for text in HOSTILE_TEXT:
            if parameter["in"] == "path":
                expected = None if path_text_valid(text, schema) else 404
                yield Probe(
                    f"path {parameter['name']}={text!r}", {**path_ids, parameter["name"]: text}, {}, base, expected
                )
            elif parameter["in"] == "query":
                integer = schema.get("type") == "integer"
                expected = 400 if integer and not integer_text_valid(text, schema) else None
                yield Probe(f"query {parameter['name']}={text!r}", path_ids, {parameter["name"]: text}, base, expected)


def test_every_field_refuses_int64_edges_and_wrong_json_types(transactional_db: None, schema: Any) -> None:
    """Every field of every operation, given each int64 edge and each wrong JSON type: what the schema
    refuses the API refuses (400 in a body or query, 404 in a path), nothing answers a 5xx or strays
    from the schema, and no refused request writes anything."""
    world = seed_world()
    raw = APIClient().get("/api/schema/?format=json").json()
    bodies = valid_bodies(world)
    failures: dict[str, str] = {}
    sent = Counter[str]()
    writes = WriteWatch()
    for operation in operations(schema):
        person = operation.path.startswith("/api/v1/me/")
        headers = world.user_headers if person else world.agent_headers
        cookies = world.user_cookies if person else None
        for probe in probes(operation, raw, world, bodies):
            case = operation.Case(
                path_parameters=probe.path_parameters,
                query=probe.query or None,
                body=probe.body if probe.body is not None else NOT_SET,
                media_type="application/json" if probe.body is not None else None,
            )
            response = case.call(headers=headers, cookies=cookies)
            sent[operation.label] += 1
            status = response.status_code
            label = f"{operation.label} {probe.where}"
            changed = writes.changed()
            if probe.expected is not None and status != probe.expected:
                failures[label] = f"answered {status}, the schema refuses it ({probe.expected}): {response.text:.300}"
            elif 400 <= status < 500 and changed:
                failures[label] = f"answered {status} and wrote {changed}"
            else:
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except FailureGroup as group:
                    failures[label] = f"answered {status}: {group.message:.500}"
    for label, count in sorted(sent.items()):
        print(f"{label}: {count} hostile values")
    for label, report in sorted(failures.items()):
        print(f"--- {label}: {report}")
    takes_input = {
        operation.label
        for operation in operations(schema)
        if raw["paths"][operation.path][operation.method.lower()].keys() & {"parameters", "requestBody"}
    }
    assert set(sent) == takes_input and len(takes_input) >= 15
    assert not failures, sorted(failures)
