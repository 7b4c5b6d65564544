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

Generation is deterministic (``derandomize``) and bounded per operation and mode. The test runs on
``transactional_db``: the WSGI handler closes connections whose autocommit differs from the settings at
the end of each request, as production does, so the cases cannot run inside the test transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.utils.crypto import get_random_string
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.schemas import APIOperation

from accounts.models import ApiScope, UserActor
from accounts.services import api_key_create
from memory.models import SharingGrant, SharingRequest
from tests.api.conftest import Runtime
from tests.factories import AgentFactory

#: Generated cases per operation and generation mode: 12 operations x 2 modes x 30 stays well under
#: two minutes on two cores.
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
    """Generated requests to every operation, as an agent or as a logged-in person, never get a 5xx
    and always get a documented status, content type and body."""
    world = seed_world()
    tally = Tally()
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
