"""A world for "what the agent knows about you", built through the runtime API and the sharing services.

Slack workspace acme: Victor (U100), Alice (U200), Bob (U300). #general is workspace-wide; #leads is a
private channel of Victor and Bob; each of Alice and Bob has a DM with the agent. Alice and Bob log in
as themselves; an operator of the tenant approves one sharing request in the admin's place.

What the agent learned, and whether it belongs on Alice's page:

| key | said by, where | about | on Alice's page |
| --- | --- | --- | --- |
| ``owns`` | Victor in #general | Alice | yes: about her, learned where she reads |
| ``lisbon`` | Alice in her DM | Alice | yes |
| ``tea`` | Alice in her DM, then forgotten | Alice | no: retired |
| ``leave`` | Alice in #general | Bob | yes: it rests on her words |
| ``standups`` | Bob in #general | Bob | no: neither about her nor hers |
| ``promotion`` | Victor in #leads | Alice | no: learned where she is not |
| ``peanuts`` | Bob in his DM, shared into #general with Bob's and Alice's consent | Alice | while the grant lives |
| ``birthday`` | Bob in his DM, shared into #general by an operator | Alice | while the grant lives (not hers to end) |
| ``rumour`` | unknown provenance | Alice | no: unknown provenance reaches nobody |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Actor, OperatorScope, UserActor
from history.audience import Audience
from memory.models import MemoryRevision, SharingGrant, SharingRequest
from memory.sharing import sharing_request_decide_as_source, sharing_request_review
from tests.api.conftest import Runtime, runtime_for
from tests.factories import AgentFactory, make_revision
from tests.ui.conftest import PASSWORD, remember

OWNS = "Owns the billing migration."
LISBON = "Lives in Lisbon."
TEA = "Drinks green tea every morning."
LEAVE = "Is on leave next week."
STANDUPS = "Prefers async standups."
PROMOTION = "Is up for promotion in March."
PEANUTS = "Is allergic to peanuts."
BIRTHDAY = "Has a birthday on May 2."
RUMOUR = "Is moving to Berlin."

LEADS = {"kind": "members", "readers": ["U100", "U300"]}
ON_ALICES_PAGE = ("owns", "lisbon", "leave", "peanuts", "birthday")
NOT_ON_ALICES_PAGE = ("tea", "standups", "promotion", "rumour")


@dataclass
class AboutWorld:
    runtime: Runtime
    revisions: dict[str, MemoryRevision]
    grants: dict[str, SharingGrant]
    alice: User
    bob: User
    operator: User
    #: A turn in #general, by Alice, whose reply cited ``owns``.
    general_turn: int

    def client(self, user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def actor(self, external_id: str) -> Actor:
        return self.runtime.actor(external_id)


def start_turn(runtime: Runtime, thread: str, who: str, text: str, audience: dict[str, Any] | None = None) -> int:
    message = runtime.say(thread, who, text, audience=audience)
    session = runtime.session(thread, who)
    response = runtime.post(f"/api/v1/sessions/{session}/turns", {"inbound_message_id": message})
    assert response.status_code == 201, response.json()
    return int(response.json()["turn_id"])


def request_sharing(runtime: Runtime, turn_id: int, revision: MemoryRevision, thread: str) -> SharingRequest:
    asked = runtime.round(
        turn_id,
        {"verb": "request_memory_sharing", "id": revision.short_id, "conversation_id": runtime.conversation(thread).pk},
    ).json()["results"][0]
    assert asked["status"] == "ok", asked
    return SharingRequest.objects.get(pk=asked["result"]["request_id"])


def users_for(runtime: Runtime, suffix: str = "") -> tuple[User, User, User]:
    """Alice and Bob logged in as themselves, and an operator of the agent's tenant."""
    alice = User.objects.create_user(username=f"alice{suffix}", password=PASSWORD)
    UserActor.objects.create(user=alice, actor=runtime.actor("U200"))
    bob = User.objects.create_user(username=f"bob{suffix}", password=PASSWORD)
    UserActor.objects.create(user=bob, actor=runtime.actor("U300"))
    operator = User.objects.create_user(username=f"operator{suffix}", password=PASSWORD, is_staff=True)
    OperatorScope.objects.create(user=operator, tenant=runtime.agent.tenant)
    return alice, bob, operator


def build_about_world() -> AboutWorld:
    runtime = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        runtime.say("general", person, "Morning all")
    runtime.say("leads", "U100", "Leads only in here.", audience=LEADS)
    alice_actor, bob_actor = runtime.actor("U200"), runtime.actor("U300")
    about_alice = {"subject_actor_id": alice_actor.pk}
    about_bob = {"subject_actor_id": bob_actor.pk}
    alice, bob, operator = users_for(runtime)
    revisions: dict[str, MemoryRevision] = {}

    turn = start_turn(runtime, "general", "U100", "Alice owns the billing migration from today.")
    (revisions["owns"],) = remember(runtime, turn, {"body": OWNS, "belief_type": "user_model_attr", **about_alice})
    assert runtime.reply(turn, "Noted.").status_code == 201

    turn = start_turn(runtime, "general", "U300", "I prefer async standups.")
    (revisions["standups"],) = remember(runtime, turn, {"body": STANDUPS, "belief_type": "preference", **about_bob})
    assert runtime.reply(turn, "Noted.").status_code == 201

    turn = start_turn(runtime, "general", "U200", "Bob is on leave next week.")
    (revisions["leave"],) = remember(runtime, turn, {"body": LEAVE, "belief_type": "status", **about_bob})
    assert runtime.reply(turn, "Noted.").status_code == 201

    turn = start_turn(runtime, "leads", "U100", "Alice is up for promotion in March.", LEADS)
    (revisions["promotion"],) = remember(runtime, turn, {"body": PROMOTION, "belief_type": "status", **about_alice})
    assert runtime.reply(turn, "Noted.").status_code == 201

    turn = start_turn(runtime, "dm-alice", "U200", "I live in Lisbon and drink green tea every morning.")
    revisions["lisbon"], revisions["tea"] = remember(
        runtime,
        turn,
        {"body": LISBON, "belief_type": "user_model_attr", **about_alice},
        {"body": TEA, "belief_type": "preference", **about_alice},
    )
    forgot = runtime.round(turn, {"verb": "forget", "id": revisions["tea"].short_id}).json()["results"][0]
    assert forgot["status"] == "ok", forgot
    assert runtime.reply(turn, "Got it.").status_code == 201

    grants: dict[str, SharingGrant] = {}
    turn = start_turn(runtime, "dm-bob", "U300", "Alice is allergic to peanuts, and her birthday is on May 2.")
    revisions["peanuts"], revisions["birthday"] = remember(
        runtime,
        turn,
        {"body": PEANUTS, "belief_type": "user_model_attr", **about_alice},
        {"body": BIRTHDAY, "belief_type": "user_model_attr", **about_alice},
    )
    consented = request_sharing(runtime, turn, revisions["peanuts"], "general")
    assert sharing_request_decide_as_source(request_id=consented.pk, user=bob, approve=True) is None
    grant = sharing_request_decide_as_source(request_id=consented.pk, user=alice, approve=True)
    assert grant is not None
    grants["peanuts"] = grant
    reviewed = request_sharing(runtime, turn, revisions["birthday"], "general")
    grant = sharing_request_review(request_id=reviewed.pk, operator=operator, approve=True)
    assert grant is not None
    grants["birthday"] = grant
    assert runtime.reply(turn, "Noted.").status_code == 201

    revisions["rumour"] = make_revision(
        runtime.agent, audience=Audience.unknown(), body=RUMOUR, belief_type="status", subject=alice_actor
    )

    asked = start_turn(runtime, "general", "U200", "Who owns the billing migration?")
    assert runtime.reply(asked, f"You do [{revisions['owns'].short_id}].").status_code == 201
    return AboutWorld(
        runtime=runtime,
        revisions=revisions,
        grants=grants,
        alice=alice,
        bob=bob,
        operator=operator,
        general_turn=asked,
    )
