"""The person's "what the agent knows about you" page: exactly the live memories about them or resting on
their words that their view ceiling admits, searchable, each correctable by the rules of the turn page
and each sharing they agreed to withdrawable; in a fixed number of queries however many it lists."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config.errors import NotFound
from memory.known import known_correction_target, known_memories
from memory.models import EntryStatus, MemoryEntry, Rejection, SharingGrant
from memory.sharing import sharing_request_decide_as_source
from tests.api.conftest import runtime_for
from tests.factories import AgentFactory
from tests.ui.about_world import (
    LISBON,
    NOT_ON_ALICES_PAGE,
    ON_ALICES_PAGE,
    AboutWorld,
    build_about_world,
    start_turn,
    users_for,
)
from tests.ui.conftest import assert_valid_html, remember, shown_ids
from tests.writes import WriteWatch

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None) -> AboutWorld:
    return build_about_world()


def page(world: AboutWorld, query: str = "") -> str:
    response = world.client(world.alice).get("/about-you/", {"q": query} if query else {})
    assert response.status_code == 200
    return str(response.content.decode())


def listed(world: AboutWorld, query: str = "") -> set[int]:
    return set(shown_ids(page(world, query)))


def ids(world: AboutWorld, *keys: str) -> set[int]:
    return {world.revisions[key].pk for key in keys}


def test_the_page_lists_what_is_about_her_or_from_her_words_and_nothing_above_her_ceiling(world: AboutWorld) -> None:
    """About Alice and learned where she reads, said by her about Bob, or shared with her consent: listed.
    About her in a channel she is not in, Bob's own words about himself, a retired memory and one of
    unknown provenance: not."""
    html = page(world)
    assert_valid_html(html)
    assert listed(world) == ids(world, *ON_ALICES_PAGE)
    assert not listed(world) & ids(world, *NOT_ON_ALICES_PAGE)
    assert "Is up for promotion" not in html and "async standups" not in html


def test_each_memory_says_what_it_is_who_said_it_and_where_it_was_learned(world: AboutWorld) -> None:
    html = page(world)
    card = memory_card(html, world.revisions["owns"].short_id)
    assert "<bdi>Victor (id U100)</bdi>" in card and "Owns the billing migration." in card
    assert re.search(r'<a href="/messages/\d+/">from this message</a>', card)
    # Bob's DM is not Alice's to open: the memory shared from it says so instead of linking.
    shared = memory_card(html, world.revisions["peanuts"].short_id)
    assert "in a conversation you are not in" in shared and "/messages/" not in shared
    assert f'href="/turns/{world.general_turn}/"' in card and "used" in card
    leave = memory_card(html, world.revisions["leave"].short_id)
    assert "<bdi>Bob (id U300)</bdi>" in leave and '<dd class="said-by-whom">you</dd>' in leave


def test_a_memory_shown_only_through_a_grant_leaves_the_page_when_the_grant_is_revoked(world: AboutWorld) -> None:
    peanuts = world.revisions["peanuts"].pk
    assert peanuts in listed(world)
    SharingGrant.objects.filter(pk=world.grants["peanuts"].pk).update(revoked_at=world.grants["peanuts"].created_at)
    assert peanuts not in listed(world)
    with pytest.raises(NotFound):
        known_correction_target(world.alice, peanuts)


def test_search_narrows_the_list_within_the_same_eligible_set(world: AboutWorld) -> None:
    assert listed(world, "lisbon") == ids(world, "lisbon")
    assert listed(world, "is") <= ids(world, *ON_ALICES_PAGE)
    assert listed(world, "promotion") == set()  # it matches, but it is above her ceiling
    assert "No memory matches" in page(world, "promotion")
    assert listed(world, "100%_") == set()  # wildcards are text


def test_the_page_groups_memories_by_kind_with_counts(world: AboutWorld) -> None:
    known = known_memories(world.alice)
    assert [(g.heading, g.total) for g in known.groups] == [("About you", 4), ("Status and deadlines", 1)]
    assert known.total == 5


def test_the_subject_corrects_a_memory_from_the_page_and_then_sees_the_new_statement(world: AboutWorld) -> None:
    old = world.revisions["lisbon"]
    response = world.client(world.alice).post(
        f"/about-you/memories/{old.pk}/reject/", {"kind": "changed", "correction": "Lives in Porto."}, follow=True
    )
    html = response.content.decode()
    entry = MemoryEntry.objects.get(pk=old.entry_id)
    new = entry.current_revision
    assert new is not None and new.body == "Lives in Porto."
    assert f"Corrected [{old.short_id}]: superseded by [{new.short_id}]" in html
    assert new.pk in shown_ids(html) and old.pk not in shown_ids(html)
    assert "Lives in Porto." in html and LISBON not in html
    rejection = Rejection.objects.get()
    assert (rejection.relation, rejection.trace_item, rejection.resulting_revision) == ("subject", None, new)


def test_not_true_retires_the_memory_and_it_leaves_the_page(world: AboutWorld) -> None:
    owns = world.revisions["owns"]
    response = world.client(world.alice).post(
        f"/about-you/memories/{owns.pk}/reject/", {"kind": "not_true"}, follow=True
    )
    html = response.content.decode()
    assert f"Retired [{owns.short_id}]" in html
    assert MemoryEntry.objects.get(pk=owns.entry_id).status == EntryStatus.FORGOTTEN
    assert owns.pk not in shown_ids(html)


def test_something_wrong_flags_it_for_review_and_it_stays(world: AboutWorld) -> None:
    leave = world.revisions["leave"]
    response = world.client(world.alice).post(f"/about-you/memories/{leave.pk}/reject/", {"kind": "wrong"}, follow=True)
    assert f"Flagged [{leave.short_id}] for review" in response.content.decode()
    assert MemoryEntry.objects.get(pk=leave.entry_id).flagged_for_review
    assert leave.pk in shown_ids(response.content.decode())


def test_not_here_cannot_be_said_from_this_page(world: AboutWorld) -> None:
    """ "True elsewhere, not here" needs a conversation: the page does not offer it and refuses it."""
    lisbon = world.revisions["lisbon"]
    watch = WriteWatch()
    response = world.client(world.alice).post(
        f"/about-you/memories/{lisbon.pk}/reject/", {"kind": "not_here"}, follow=True
    )
    assert "could not be read; nothing was changed" in response.content.decode()
    assert not [t for t in watch.changed() if t.startswith("memory_")]
    assert 'value="not_here"' not in page(world)
    assert "from a turn in that conversation" in page(world)


def test_a_memory_not_on_her_page_cannot_be_corrected_from_it(world: AboutWorld) -> None:
    """Bob's memory about himself, and one about her from a channel she is not in: a 404 like a missing
    memory, and nothing is written."""
    client = world.client(world.alice)
    watch = WriteWatch()
    for key in ("standups", "promotion", "tea", "rumour"):
        revision = world.revisions[key]
        response = client.post(f"/about-you/memories/{revision.pk}/reject/", {"kind": "not_true"})
        assert response.status_code == 404, key
    assert client.post("/about-you/memories/999999999/reject/", {"kind": "not_true"}).status_code == 404
    assert not [t for t in watch.changed() if not t.startswith("django_session")]


def test_she_withdraws_a_sharing_she_agreed_to(world: AboutWorld) -> None:
    grant = world.grants["peanuts"]
    html = page(world)
    assert f'action="/about-you/grants/{grant.pk}/revoke/"' in html
    response = world.client(world.alice).post(f"/about-you/grants/{grant.pk}/revoke/", follow=True)
    assert "Stopped sharing" in response.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    assert world.revisions["peanuts"].pk not in shown_ids(response.content.decode())


def test_she_cannot_withdraw_a_sharing_she_did_not_agree_to(world: AboutWorld) -> None:
    grant = world.grants["birthday"]  # approved by an operator
    html = page(world)
    card = memory_card(html, world.revisions["birthday"].short_id)
    assert "/revoke/" not in card and "You did not agree to this sharing" in card
    client = world.client(world.alice)
    watch = WriteWatch()
    response = client.post(f"/about-you/grants/{grant.pk}/revoke/")
    assert response.status_code == 404  # exactly like a grant that does not exist
    assert client.post("/about-you/grants/999999999/revoke/").status_code == 404
    assert not [t for t in watch.changed() if not t.startswith("django_session")]
    grant.refresh_from_db()
    assert grant.revoked_at is None


def test_the_page_needs_a_login_and_shows_a_stranger_nothing(world: AboutWorld) -> None:
    from django.test import Client

    assert Client().get("/about-you/").status_code == 302
    html = world.client(world.operator).get("/about-you/").content.decode()
    assert shown_ids(html) == [] and "holds no memory about you" in html


def test_text_direction_is_isolated_for_every_piece_of_user_text(world: AboutWorld) -> None:
    """A right-to-left override in a statement or a name must not reverse the rest of the line."""
    actor = world.actor("U100")
    actor.display_name = "Vic\u202etor"
    actor.save(update_fields=["display_name"])
    html = page(world, "billing")
    assert "<bdi>Vic\u202etor (id U100)</bdi>" in html
    assert re.search(r'<p class="statement" dir="auto">Owns the billing migration.</p>', html)
    assert "“<bdi>billing</bdi>”" in html


def memory_card(html: str, short: str) -> str:
    start = html.index(f'data-memory-id="{short}"')
    end = html.find('<li class="item"', start + 1)
    return html[start : end if end != -1 else len(html)]


# --------------------------------------------------------------------------------------------------
# the page's queries do not grow with what it lists
# --------------------------------------------------------------------------------------------------


def world_of(count: int) -> AboutWorld:
    """Alice with ``count`` memories about herself, each recalled on turns of her DM and #general, one
    cited by a reply, and each shared into #general with her consent."""
    runtime = runtime_for(AgentFactory.create())
    for person in ("U100", "U200", "U300"):
        runtime.say("general", person, "Morning all")
    alice, bob, operator = users_for(runtime, suffix=str(count))
    about_alice = {"subject_actor_id": runtime.actor("U200").pk, "always_on": True, "salience": 0.9}
    revisions = {}
    for first in range(0, count, 6):
        turn = start_turn(runtime, "dm-alice", "U200", "Some things about me.")
        calls = [
            {"body": f"Fact number {n} about Alice.", "belief_type": "user_model_attr", **about_alice}
            for n in range(first, min(first + 6, count))
        ]
        for revision in remember(runtime, turn, *calls):
            revisions[str(revision.pk)] = revision
        assert runtime.reply(turn, "Noted.").status_code == 201
    turn = start_turn(runtime, "dm-alice", "U200", "Please share these with #general.")
    general = runtime.conversation("general").pk
    shared = list(revisions.values())
    for first in range(0, count, 8):
        calls = [
            {"verb": "request_memory_sharing", "id": r.short_id, "conversation_id": general}
            for r in shared[first : first + 8]
        ]
        for result in runtime.round(turn, *calls).json()["results"]:
            assert result["status"] == "ok", result
            request_id = result["result"]["request_id"]
            assert sharing_request_decide_as_source(request_id=request_id, user=alice, approve=True) is not None
    assert runtime.reply(turn, "Asked.").status_code == 201
    for thread in ("dm-alice", "general"):
        asked = start_turn(runtime, thread, "U200", "What do you know about me?")
        cited = " ".join(f"[{r.short_id}]" for r in revisions.values())
        assert runtime.reply(asked, f"These: {cited}").status_code == 201
    return AboutWorld(runtime, revisions, {}, alice, bob, operator, asked)


def rendered_queries(world: AboutWorld) -> tuple[int, str]:
    client = world.client(world.alice)
    client.get("/about-you/")  # the session and the login are loaded once, as for any page
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/about-you/")
    assert response.status_code == 200
    return len(queries.captured_queries), response.content.decode()


def test_the_page_runs_the_same_number_of_queries_for_3_memories_and_for_12() -> None:
    counts = {}
    for count in (3, 12):
        world = world_of(count)
        queries, html = rendered_queries(world)
        known = known_memories(world.alice)
        memories = [m for g in known.groups for m in g.memories]
        assert len(memories) == count
        assert all(m.turns and m.grants and m.grants[0].revocable for m in memories), "every memory used and shared"
        assert html.count('class="grant"') == count
        counts[count] = queries
    print("about-you queries", counts)
    assert counts[3] == counts[12], counts


def test_every_turn_listed_under_a_memory_shows_it_on_that_turns_page(world: AboutWorld) -> None:
    """The turns under a memory are judged like the turn page's items: each one listed shows the memory
    there, and none is a turn of a conversation she cannot read (Bob's DM, where two were learned)."""
    client = world.client(world.alice)
    dm_bob = world.runtime.conversation("dm-bob")
    listed_turns = 0
    for group in known_memories(world.alice).groups:
        for memory in group.memories:
            for used in memory.turns:
                listed_turns += 1
                assert str(dm_bob) != used.conversation
                turn_page = client.get(f"/turns/{used.turn_id}/")
                assert turn_page.status_code == 200
                assert memory.revision_id in shown_ids(turn_page.content.decode())
    assert listed_turns >= 4
