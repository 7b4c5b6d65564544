"""Authorization probes: every id of another perspective, in every path of the URLconf, answers 404
(``code: not_found`` for the JSON API) exactly as a missing id does; ids of another agent inside
request bodies are treated as unknown too, and change nothing.

The endpoints are enumerated from the URLconf, so a new endpoint is probed as soon as it exists: the
test fails until its path parameters have a victim object in ``victim_ids`` and, for a POST, a valid
body in ``BODIES`` (a body must be valid, or a 400 would answer before the lookup is reached).

Probers: an agent of the same tenant, an agent of another tenant (API keys), and end users logged
in (another actor of the same agent, an actor of another tenant) for session-authenticated pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authentication import SessionAuthentication
from rest_framework.test import APIClient
from rest_framework.views import APIView

from accounts.models import ApiScope, UserActor
from history.models import Message
from memory.models import MemoryRevision, RecallTraceItem, SharingGrant, SharingRequest
from memory.sharing import sharing_request_decide_as_source
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory, TenantFactory

#: Valid request bodies per URL name (ids in them belong to the prober, never to the victim).
BODIES: dict[str, Any] = {
    "turns-create": lambda own: {"inbound_message_id": own["message_id"]},
    "turns-rounds": lambda own: {"calls": [{"verb": "recall", "query": "roadmap"}]},
    "turns-reply": lambda own: {"body": "Hello."},
    "me-sharing-decision": lambda own: {"approve": True},
    "me-grants-revoke": lambda own: {},
    "engram-reject": lambda own: {"kind": "not_true"},
    "engram-reject-written": lambda own: {"kind": "not_true"},
    "engram-about-reject": lambda own: {"kind": "not_true"},
}
SKIPPED_PREFIXES = ("admin/",)
METHODS = ("get", "post", "put", "patch", "delete")
#: Ids in a route: a row id, or a memory as people name it (``<memory:…>``, probed with its ``m:`` id).
PARAM = re.compile(r"<(?:int|id|memory):(\w+)>")


@dataclass(frozen=True)
class Endpoint:
    name: str
    route: str
    view: Any

    @property
    def params(self) -> list[str]:
        return PARAM.findall(self.route)

    @property
    def api_class(self) -> type[APIView] | None:
        view_class = getattr(self.view, "view_class", None) or getattr(self.view, "cls", None)
        return view_class if isinstance(view_class, type) and issubclass(view_class, APIView) else None

    @property
    def session_authenticated(self) -> bool:
        api = self.api_class
        if api is None:
            return True  # the template views: Django login
        return any(issubclass(a, SessionAuthentication) for a in api.authentication_classes)

    @property
    def methods(self) -> list[str]:
        api = self.api_class
        if api is not None:
            return [m for m in METHODS if hasattr(api, m)]
        return ["get", "post"]  # a function view: whatever it refuses answers 405, never 200

    def path(self, ids: dict[str, int | str]) -> str:
        return "/" + PARAM.sub(lambda m: str(ids[m.group(1)]), self.route)


def endpoints() -> Iterator[Endpoint]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[Endpoint]:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                if not route.startswith(SKIPPED_PREFIXES):
                    yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and PARAM.search(route):
                yield Endpoint(pattern.name or route, route, pattern.callback)

    yield from walk(get_resolver().url_patterns, "")


@dataclass
class World:
    victim: Runtime
    ids: dict[str, int | str]
    agent_probers: dict[str, tuple[APIClient, dict[str, Any]]]
    user_probers: dict[str, APIClient]
    victim_user: APIClient


def logged_in(runtime: Runtime, external_id: str, username: str) -> APIClient:
    user = User.objects.create_user(username=username, password="pw")
    UserActor.objects.create(user=user, actor=runtime.actor(external_id))
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def world(db: None) -> World:
    victim = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        victim.say("general", person, "Morning all")
    first = victim.turn("dm-alice", "U200", "I am worried about the roadmap review.")
    made = victim.round(first["turn_id"], {"verb": "remember", "body": "Alice worries about the roadmap review."})
    memory_id = made.json()["results"][0]["result"]["id"]
    general = victim.conversation("general").pk
    shared = victim.round(
        first["turn_id"],
        {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general},
    )
    approved_request = shared.json()["results"][0]["result"]["request_id"]
    second = victim.turn("dm-alice", "U200", "Anything about the roadmap review?")
    pending = victim.round(
        second["turn_id"], {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": general}
    )
    pending_request = pending.json()["results"][0]["result"]["request_id"]
    victim_user = logged_in(victim, "U200", "alice")
    alice = User.objects.get(username="alice")
    grant = sharing_request_decide_as_source(request_id=approved_request, user=alice, approve=True)
    assert grant is not None and SharingRequest.objects.filter(pk=pending_request).exists()
    item = RecallTraceItem.objects.filter(trace__turn_id=second["turn_id"]).first()
    assert item is not None, "the second turn's recall should render the memory"
    ids = {
        "session_id": second["session_id"],
        "turn_id": second["turn_id"],
        "trace_id": second["recall"]["trace_id"],
        "request_id": pending_request,
        "grant_id": grant.pk,
        "item_id": item.pk,
        "entry_id": MemoryRevision.objects.get(pk=int(memory_id.removeprefix("m:"), 16)).entry_id,
        "memory_id": memory_id,
        # The revision both turns' ledgers name (written by the first, asked to be shared by the second).
        "revision_id": int(memory_id.removeprefix("m:"), 16),
        "message_id": Message.objects.filter(agent=victim.agent, conversation__external_thread_id="dm-alice")
        .order_by("pk")
        .values_list("pk", flat=True)
        .first(),
    }

    agent_probers: dict[str, tuple[APIClient, dict[str, Any]]] = {}
    for label, agent in (
        ("same tenant, other agent", AgentFactory.create(tenant=victim.agent.tenant)),
        ("other tenant", AgentFactory.create(tenant=TenantFactory.create())),
    ):
        # Both scopes: the probes reach every lookup (a key without a scope is refused before any).
        prober = runtime_for(agent, ApiScope.RUNTIME, ApiScope.MANAGE)
        own_message = prober.say("general", "U100", "Morning, roadmap review")
        agent_probers[label] = (prober.client, {"message_id": own_message, "runtime": prober})
    other_tenant_runtime: Runtime = agent_probers["other tenant"][1]["runtime"]
    user_probers = {
        "same agent, other actor": logged_in(victim, "U300", "bob"),
        "other tenant user": logged_in(other_tenant_runtime, "U100", "mallory"),
    }
    return World(victim, ids, agent_probers, user_probers, victim_user)


def test_the_urlconf_has_id_bearing_endpoints_to_probe() -> None:
    names = {e.name for e in endpoints()}
    assert {"sessions-detail", "turns-rounds", "traces-detail", "me-grants-revoke", "engram-turn"} <= names


def test_every_cross_perspective_id_in_every_path_answers_404_not_found(world: World) -> None:
    probed = 0
    for endpoint in endpoints():
        missing = [p for p in endpoint.params if p not in world.ids]
        assert not missing, f"{endpoint.name}: add a victim object for {missing} to the world fixture"
        path = endpoint.path(world.ids)
        clients: list[tuple[str, APIClient, dict[str, Any]]]
        if endpoint.session_authenticated:
            clients = [(label, client, {}) for label, client in world.user_probers.items()]
        else:
            clients = [(label, client, own) for label, (client, own) in world.agent_probers.items()]
        for method in endpoint.methods:
            if method != "get" and endpoint.api_class is not None and endpoint.name not in BODIES:
                pytest.fail(f"{endpoint.name}: add a valid {method.upper()} body to BODIES")
            for label, client, own in clients:
                if method == "get":
                    response = client.get(path)
                elif endpoint.api_class is None:  # a template view takes a form, if it takes a POST at all
                    response = client.post(path, BODIES.get(endpoint.name, lambda own: {})(own))
                else:
                    response = getattr(client, method)(path, BODIES[endpoint.name](own), format="json")
                probed += 1
                if endpoint.api_class is None and response.status_code == 405:
                    continue  # a template view refusing the method before any lookup
                assert response.status_code == 404, (endpoint.name, method, label, response.status_code)
                if endpoint.api_class is not None:
                    assert response.json()["code"] == "not_found", (endpoint.name, method, label, response.json())
    assert probed >= 20


def test_the_probes_changed_nothing_and_the_owner_still_sees_everything(world: World) -> None:
    test_every_cross_perspective_id_in_every_path_answers_404_not_found(world)
    assert SharingRequest.objects.get(pk=world.ids["request_id"]).state == "pending"
    assert SharingGrant.objects.get(pk=world.ids["grant_id"]).revoked_at is None
    assert world.victim.get(f"/api/v1/turns/{world.ids['turn_id']}/ledger").status_code == 200
    assert world.victim.get(f"/api/v1/traces/{world.ids['trace_id']}").status_code == 200
    assert world.victim.manager().get(f"/api/v1/memories/{world.ids['entry_id']}").status_code == 200
    assert world.victim.manager().get(f"/api/v1/memories/{world.ids['memory_id']}").status_code == 200
    assert world.victim_user.get(f"/turns/{world.ids['turn_id']}/").status_code == 200


def test_ids_of_another_agent_inside_bodies_are_unknown_and_change_nothing(world: World) -> None:
    client, own = world.agent_probers["same tenant, other agent"]
    prober: Runtime = own["runtime"]
    victim_conversation = world.victim.conversation("dm-alice").pk
    victim_revision = MemoryRevision.objects.filter(agent=world.victim.agent).order_by("pk").first()
    assert victim_revision is not None
    victim_memory = f"m:{victim_revision.pk:08x}"

    opened = prober.post("/api/v1/sessions", {"conversation_id": victim_conversation})
    assert opened.status_code == 404 and opened.json()["code"].endswith("not_found")
    session = prober.session("general")
    started = prober.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": world.ids["message_id"]})
    assert started.status_code == 404 and started.json()["code"].endswith("not_found")
    window = prober.post(
        f"/api/v1/sessions/{session}/turns",
        {"inbound_message_id": own["message_id"], "loaded_message_ids": [world.ids["message_id"]]},
    )
    assert window.status_code == 422 and window.json()["code"] == "unknown_parent"

    turn = prober.turn("general", "U100", "Roadmap review?")
    ran = prober.round(
        turn["turn_id"],
        {"verb": "amend", "id": victim_memory, "body": "Rewritten by someone else."},
        {"verb": "forget", "id": victim_memory},
        {"verb": "request_memory_sharing", "id": victim_memory, "conversation_id": victim_conversation},
        {"verb": "search_history", "query": "roadmap review", "conversation_id": victim_conversation},
        {"verb": "recall", "query": "Alice worries about the roadmap review"},
    ).json()["results"]
    assert [(r["status"], r["code"]) for r in ran[:3]] == [("unchanged", "unknown_memory")] * 3
    assert ran[3]["result"]["message_ids"] == [] and ran[3]["result"]["hits"] == []
    assert victim_memory not in ran[4]["result"]["block"] and ran[4]["result"]["items"] == []
    replied = prober.reply(turn["turn_id"], f"See [{victim_memory}].", cited_ids=[victim_memory])
    assert replied.status_code == 201 and replied.json()["cited"] == []

    assert MemoryRevision.objects.filter(entry=victim_revision.entry).count() == 1
    assert victim_revision.entry.status == "live"
    assert client.get(f"/api/v1/turns/{world.ids['turn_id']}/ledger").status_code == 404
