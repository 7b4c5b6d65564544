"""How far an approved grant reaches: the one conversation it was approved for, and nowhere else.

Alice tells the agent, in her DM, when the Atlas launch is; the agent asks to share that memory with
the public channel #atlas-core; Alice approves, logged in as herself. The grant's audience is
``public``, which by the audience rule alone would reach every conversation of the agent. The consent
was for #atlas-core, so (spec 000, revision-scoped grants; spec 003, the disclosure rule; see
docs/grants.md) the memory is recalled in #atlas-core and not in Bob's DM, not in #general (another
channel of the workspace) and not in a channel of another workspace, through every entry point that
reads memories: the session snapshot, in-turn recall, the recall verb, the admin "retrieve as turn"
preview, the end user's "what did you know" page, and history search of an agent reply built on it.
Revoking the grant hides it again everywhere, #atlas-core included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounts.models import UserActor
from history.models import Conversation, Turn
from memory.models import RecallTrace, SharingGrant
from memory.previews import recall_preview
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.selectors import items_within_ceilings, turn_traces
from memory.sharing import grant_revoke
from tests.api.conftest import Runtime

pytestmark = pytest.mark.django_db

ATLAS_CORE = {"kind": "public"}
QUESTION = "When is the Atlas launch date?"
FACT = "The Atlas launch date is March 3."


@dataclass
class Shared:
    runtime: Runtime
    alice: APIClient
    grant_id: int
    memory_id: str
    revision_id: int
    #: Conversations the grant does not cover: Bob's DM, another channel, another workspace's channel.
    elsewhere: tuple[str, ...] = ("dm-bob", "general", "globex-ops")

    def conversation(self, thread: str) -> Conversation:
        return self.runtime.conversation(thread)

    def turn(self, thread: str, text: str = QUESTION) -> dict[str, Any]:
        who = "U300" if thread != "globex-ops" else "G100"
        message = say(self.runtime, thread, who, text)
        session = self.runtime.post(
            "/api/v1/sessions",
            {"conversation_id": self.conversation(thread).pk, "requester_actor_id": self.runtime.actor(who).pk},
        )
        assert session.status_code == 201, session.json()
        self.last_snapshot = session.json()["snapshot"]
        started = self.runtime.post(
            f"/api/v1/sessions/{session.json()['session_id']}/turns", {"inbound_message_id": message}
        )
        assert started.status_code == 201, started.json()
        return dict(started.json())

    def seen_by_turn(self, thread: str) -> dict[str, bool]:
        """Whether the memory reached a new turn in ``thread`` by each of the turn's own reads."""
        turn = self.turn(thread)
        recalled = self.runtime.round(turn["turn_id"], {"verb": "recall", "query": "Atlas launch date March"}).json()
        return {
            "snapshot": self.memory_id in ids(self.last_snapshot),
            "in_turn": self.memory_id in ids(turn["recall"]),
            "recall": self.memory_id in ids(recalled["results"][0]["result"]),
        }

    def previewed(self, thread: str) -> bool:
        preview = recall_preview(perspective=perspective_for_conversation(self.conversation(thread)), message=QUESTION)
        return self.revision_id in [item.revision_id for item in preview.result.items]


def ids(recall: dict[str, Any] | None) -> list[str]:
    return [item["id"] for item in (recall or {}).get("items", [])]


def say(runtime: Runtime, thread: str, who: str, body: str) -> int:
    """Like ``Runtime.say``, plus #atlas-core (public) and a channel of another Slack workspace."""
    if thread == "atlas-core":
        return runtime.say(thread, who, body, audience=ATLAS_CORE)
    if thread != "globex-ops":
        return runtime.say(thread, who, body)
    runtime.counter[0] += 1
    response = runtime.post(
        "/api/v1/messages",
        {
            "messages": [
                {
                    "connector": {"type": "slack", "name": "globex"},
                    "thread": {"external_id": thread, "audience": {"kind": "workspace"}},
                    "actor": {"external_id": who, "display_name": "Gina"},
                    "external_id": f"globex-{runtime.counter[0]}",
                    "body": body,
                    "created_at": f"2026-11-30T10:{runtime.counter[0] // 60:02d}:{runtime.counter[0] % 60:02d}Z",
                    "evidence": {"method": "connector_signed"},
                }
            ]
        },
    )
    assert response.status_code == 201, response.json()
    return int(response.json()["messages"][0]["message_id"])


@pytest.fixture
def shared(runtime: Runtime, alice_browser: APIClient) -> Shared:
    """Alice's DM memory, shared with #atlas-core by her own approval (the product's only path). It is a
    standing, salient fact, so every read of an eligible conversation (the snapshot included) has it."""
    say(runtime, "atlas-core", "U300", "Does anyone know the Atlas launch date?")
    say(runtime, "globex-ops", "G100", "Morning from Globex")
    say(runtime, "dm-bob", "U300", "hi")
    turn = runtime.turn("dm-alice", "U200", "The Atlas launch is March 3; fine to tell #atlas-core.")
    remember = {"verb": "remember", "body": FACT, "always_on": True, "salience": 0.9}
    written = runtime.round(turn["turn_id"], remember).json()["results"][0]["result"]
    asked = runtime.round(
        turn["turn_id"],
        {
            "verb": "request_memory_sharing",
            "id": written["id"],
            "conversation_id": runtime.conversation("atlas-core").pk,
        },
    ).json()["results"][0]
    assert asked["status"] == "ok", asked
    decided = alice_browser.post(
        f"/api/v1/me/sharing-requests/{asked['result']['request_id']}/decision", {"approve": True}, format="json"
    )
    assert decided.status_code == 200, decided.json()
    grant = SharingGrant.objects.get(pk=decided.json()["grant_id"])
    assert grant.conversation_id == runtime.conversation("atlas-core").pk
    assert grant.audience_kind == "public"  # by its audience alone it would reach everywhere
    return Shared(
        runtime=runtime,
        alice=alice_browser,
        grant_id=grant.pk,
        memory_id=written["id"],
        revision_id=int(written["revision_id"]),
    )


def share_into_general(shared: Shared) -> int:
    """A second request, into #general, approved by Alice: a second grant (its id)."""
    runtime = shared.runtime
    turn = runtime.turn("dm-alice", "U200", "You may tell #general as well.")
    general = runtime.conversation("general").pk
    asked = runtime.round(
        turn["turn_id"], {"verb": "request_memory_sharing", "id": shared.memory_id, "conversation_id": general}
    ).json()["results"][0]
    decided = shared.alice.post(
        f"/api/v1/me/sharing-requests/{asked['result']['request_id']}/decision", {"approve": True}, format="json"
    )
    assert decided.status_code == 200, decided.json()
    return int(decided.json()["grant_id"])


def revoke(shared: Shared) -> None:
    response = shared.alice.post(f"/api/v1/me/grants/{shared.grant_id}/revoke", format="json")
    assert response.status_code == 200 and response.json()["revoked"] is True


def test_the_granted_memory_reaches_every_read_of_the_conversation_it_was_approved_for(shared: Shared) -> None:
    """In #atlas-core the session snapshot, in-turn recall, the recall verb and the admin preview all
    have the memory."""
    assert shared.seen_by_turn("atlas-core") == {"snapshot": True, "in_turn": True, "recall": True}
    assert shared.previewed("atlas-core")


@pytest.mark.parametrize("thread", ["dm-bob", "general", "globex-ops"])
def test_the_granted_memory_reaches_no_other_conversation(shared: Shared, thread: str) -> None:
    """Bob's DM, another channel of the workspace and a channel of another workspace never see it, by
    any read, although the grant's public audience would reach all three."""
    assert shared.seen_by_turn(thread) == {"snapshot": False, "in_turn": False, "recall": False}
    assert not shared.previewed(thread)


def test_revoking_the_grant_hides_the_memory_in_its_conversation_again(shared: Shared) -> None:
    """Revocation takes effect on the next read of every kind."""
    revoke(shared)
    assert shared.seen_by_turn("atlas-core") == {"snapshot": False, "in_turn": False, "recall": False}
    assert not shared.previewed("atlas-core")


def test_a_second_approved_conversation_is_a_second_grant_and_each_ends_alone(shared: Shared) -> None:
    """Sharing into #general too takes its own request and approval; revoking the #atlas-core grant
    leaves #general's standing, and the other conversations still see nothing."""
    share_into_general(shared)
    assert shared.seen_by_turn("general")["recall"]
    revoke(shared)
    assert shared.seen_by_turn("general")["recall"]
    assert not shared.seen_by_turn("atlas-core")["recall"]
    assert not shared.seen_by_turn("dm-bob")["recall"]


# --------------------------------------------------------------------------------------------------
# the end user's "what did you know" page
# --------------------------------------------------------------------------------------------------


def bob_logged_in(runtime: Runtime) -> User:
    user = User.objects.create_user(username="bob", password="pw")
    UserActor.objects.create(user=user, actor=runtime.actor("U300"))
    return user


def shown(user: User, turn_id: int, revision_id: int) -> bool:
    turn = Turn.objects.get(pk=turn_id)
    traces: list[RecallTrace] = turn_traces(turn)
    return any(
        item.revision_id == revision_id
        for trace in traces
        for item in trace.items.filter(pk__in=items_within_ceilings(user, trace))
    )


def test_the_turn_page_shows_a_granted_item_only_on_the_conversation_it_was_granted_for(shared: Shared) -> None:
    """Bob reads #atlas-core and #general. A turn in #general recalled the memory while a second grant
    covered #general; once that grant is revoked, the #atlas-core grant (public, which by its audience
    would reach Bob) does not keep it on #general's page, while #atlas-core's page still shows it."""
    runtime = shared.runtime
    bob = bob_logged_in(runtime)
    in_core = shared.turn("atlas-core")
    assert shared.memory_id in ids(in_core["recall"])

    general_grant = share_into_general(shared)
    in_general = shared.turn("general")
    assert shared.memory_id in ids(in_general["recall"])
    assert shown(bob, in_general["turn_id"], shared.revision_id)

    grant_revoke(grant_id=general_grant, user=User.objects.get(username="alice"))

    assert not shown(bob, in_general["turn_id"], shared.revision_id)
    assert shown(bob, in_core["turn_id"], shared.revision_id)
    revoke(shared)
    assert not shown(bob, in_core["turn_id"], shared.revision_id)


# --------------------------------------------------------------------------------------------------
# replies built on the granted memory
# --------------------------------------------------------------------------------------------------


def found(shared: Shared, thread: str, text: str, message_id: int) -> bool:
    """Is ``message_id`` among the hits or neighbours of a history search from ``thread``?"""
    result = search_history(
        perspective=perspective_for_conversation(shared.conversation(thread)),
        query=HistoryQuery(text=text, limit=20),
        providers=(),
    )
    return message_id in result.message_ids


def test_a_reply_built_on_the_granted_memory_stays_in_the_conversation_the_grant_covers(shared: Shared) -> None:
    """The agent answers in #atlas-core from the granted memory. The reply is public text, but it
    carries the memory: history search finds it (as a hit and as a neighbour) from #atlas-core only,
    never from Bob's DM, #general or another workspace, and nowhere once the grant is revoked."""
    runtime = shared.runtime
    turn = shared.turn("atlas-core")
    assert shared.memory_id in ids(turn["recall"])
    delivered = runtime.reply(turn["turn_id"], f"It is on March 3, per Alice [{shared.memory_id}].")
    assert delivered.status_code == 201, delivered.json()
    reply = int(delivered.json()["message_id"])
    assert shared.revision_id in delivered.json()["memory_revision_ids"]
    # A public line right after it, so the reply is also a neighbour of a hit.
    after = say(runtime, "atlas-core", "U300", "Thanks, noted the tangerine milestone.")

    assert found(shared, "atlas-core", "March Alice", reply)
    assert found(shared, "atlas-core", "tangerine milestone", after)
    for thread in shared.elsewhere:
        assert found(shared, thread, "tangerine milestone", after), thread  # the public line is fair game
        assert not found(shared, thread, "March Alice", reply), thread
        assert not found(shared, thread, "tangerine milestone", reply), thread

    revoke(shared)
    assert not found(shared, "atlas-core", "March Alice", reply)
    assert not found(shared, "atlas-core", "tangerine milestone", reply)
