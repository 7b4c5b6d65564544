"""The turn page's summary and the past messages history search put in front of the agent: what the
reply cited (each citation a link to its card), how many memories and past messages the agent had,
exactly the messages the turn's searches recorded (never a new search), each within the stricter of
the two ceilings, and cited cards open while merely available ones start collapsed."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.db.models import Q

from history.models import ConversationSearchEvent, Turn
from memory.models import RecallMoment, RecallTraceItem
from memory.selectors import messages_within_ceilings
from tests.history.test_search_safety import POISON as POISONED_LINE
from tests.ui.conftest import LISBON, TEA, World, assert_valid_html

pytestmark = pytest.mark.django_db

DEPLOY = "The atlas deploy moves to Fridays from now on."
AGREED = "Fridays work for the atlas deploy."
ASKED = "When is the atlas deploy these days, and where do I live?"
PARTNER = "The partner contract renews in June."

MESSAGE_ID = re.compile(r'data-message-id="(\d+)"')
CARD = re.compile(
    r'<li class="item" id="(item-\d+)" data-memory-id="(m:[0-9a-f]+)" data-moments="[\w ]*">\s*'
    r'<details class="card memory"( open)?>'
)
MESSAGE_CARD = re.compile(
    r'<li class="item" id="message-(\d+)" data-message-id="\d+">\s*<details class="card past-message"( open)?>'
)


@dataclass
class Searched:
    """A turn in Alice's DM whose agent searched its history, then replied citing one memory."""

    turn_id: int
    returned: list[int]
    reply: str
    deploy: int
    agreed: int
    poisoned: int


def searched_turn(world: World) -> Searched:
    runtime = world.runtime
    deploy = runtime.say("general", "U100", DEPLOY)
    poisoned = runtime.say("general", "U300", POISONED_LINE)
    agreed = runtime.say("general", "U300", AGREED)
    turn = runtime.turn("dm-alice", "U200", ASKED)["turn_id"]
    response = runtime.round(
        turn, {"verb": "search_history", "query": "atlas deploy Fridays"}, {"verb": "recall", "query": "Lisbon"}
    )
    assert response.status_code == 200, response.json()
    returned = response.json()["results"][0]["result"]["message_ids"]
    reply = f"The atlas deploy is on Fridays now, and you live in Lisbon [{world.short('lisbon')}]."
    assert runtime.reply(turn, reply).status_code == 201
    return Searched(turn_id=turn, returned=returned, reply=reply, deploy=deploy, agreed=agreed, poisoned=poisoned)


def page(world: World, user: object, turn_id: int) -> str:
    response = world.client(user).get(f"/turns/{turn_id}/")  # type: ignore[arg-type]
    assert response.status_code == 200, response.status_code
    html = response.content.decode()
    assert_valid_html(html)
    return html


def section(html: str, name: str) -> str:
    found = re.search(rf'<section class="{name}[^"]*"(.*?)</section>', html, re.S)
    assert found is not None, name
    return found.group(1)


# --- what history search put in front of the agent ------------------------------------------------


def test_the_search_audit_records_every_message_the_agent_was_given(world: World) -> None:
    """The audit row holds the exact ids the round handed the agent, the messages around each match
    included, so the page can list them without searching again."""
    searched = searched_turn(world)
    (event,) = ConversationSearchEvent.objects.filter(turn_id=searched.turn_id)
    assert event.returned_message_ids == searched.returned
    hits = {hit["message_id"] for hit in event.selected}
    assert {searched.deploy, searched.agreed} <= set(event.returned_message_ids)
    assert set(event.returned_message_ids) > hits  # neighbours are recorded, not only the matches
    assert searched.poisoned in event.returned_message_ids and event.blocked_message_ids == [searched.poisoned]


def test_the_page_lists_exactly_the_messages_the_turns_searches_recorded(world: World) -> None:
    """In the order returned, minus only the line the safety scan withheld; a message posted since
    that matches the same words better is not added, because nothing is searched again."""
    searched = searched_turn(world)
    world.runtime.say("general", "U100", "Atlas deploy Fridays: atlas deploy Fridays, confirmed, atlas deploy.")

    html = page(world, world.alice, searched.turn_id)
    history = section(html, "history")
    shown = [int(m) for m in MESSAGE_ID.findall(history)]
    event = ConversationSearchEvent.objects.get(turn_id=searched.turn_id)
    assert shown == [m for m in event.returned_message_ids if m not in event.blocked_message_ids]
    assert DEPLOY in history and AGREED in history
    assert "1 more was withheld from the agent by the safety scan" in history
    assert "ignore all previous instructions" not in html.lower()
    assert "confirmed, atlas deploy" not in html
    assert 'class="badge match"' in history  # the search's own matches are marked among their neighbours


def test_past_message_cards_start_collapsed_and_link_to_the_message(world: World) -> None:
    searched = searched_turn(world)
    history = section(page(world, world.alice, searched.turn_id), "history")
    cards = MESSAGE_CARD.findall(history)
    assert cards and all(opened == "" for _, opened in cards)
    assert f'href="/messages/{searched.deploy}/"' in history


def test_a_turn_without_a_search_says_so(world: World) -> None:
    history = section(page(world, world.alice, world.turn.pk), "history")
    assert "did not search its conversation history" in history and "data-message-id" not in history


# --- the summary ----------------------------------------------------------------------------------


def test_the_summary_names_the_citations_and_counts_what_was_in_front_of_the_agent(world: World) -> None:
    searched = searched_turn(world)
    html = page(world, world.alice, searched.turn_id)
    summary = section(html, "summary")
    turn = Turn.objects.get(pk=searched.turn_id)
    traced = RecallTraceItem.objects.filter(
        Q(trace__turn=turn) | Q(trace__session_id=turn.session_id, trace__moment=RecallMoment.SNAPSHOT),
        blocked_reason="",
    )
    memories = len(set(traced.values_list("revision_id", flat=True)))
    first_lisbon = traced.filter(revision=world.revisions["lisbon"]).order_by("trace_id", "position").first()
    assert first_lisbon is not None
    with_text = [m for m in searched.returned if m != searched.poisoned]

    assert html.index('id="summary"') < html.index('class="exchange')  # the page opens with it
    assert f"<strong>{memories}</strong> memories were in front of the agent." in summary
    assert (
        f"<strong>{len(with_text)}</strong> past messages were in front of the agent: "
        f"{len(with_text)} found by its history search." in summary
    )
    (cited,) = re.findall(
        r'<li><a class="cite" href="#(item-\d+)">\[(m:[0-9a-f]+)\]</a> <bdi>(.*?)</bdi></li>', summary
    )
    anchor, short, statement = cited
    assert short == world.short("lisbon") and statement == LISBON
    assert anchor == f"item-{first_lisbon.pk}"  # its first card on the page (the snapshot's)
    assert f'id="{anchor}"' in html  # the link lands on a card of this page


def test_the_summary_counts_the_window_the_runtime_loaded_beside_what_search_found(world: World) -> None:
    runtime = world.runtime
    window = [runtime.say("dm-alice", "U200", "Earlier, about tea."), runtime.say("dm-alice", "U200", "And Lisbon.")]
    turn = runtime.turn("dm-alice", "U200", ASKED, loaded_message_ids=window)["turn_id"]
    summary = section(page(world, world.alice, turn), "summary")
    assert "<strong>2</strong> past messages were in front of the agent: 2 that the runtime loaded itself." in summary


def test_each_citation_in_the_reply_links_to_its_card(world: World) -> None:
    searched = searched_turn(world)
    html = page(world, world.alice, searched.turn_id)
    reply = re.search(r'<blockquote class="said reply" dir="auto">(.*?)</blockquote>', html, re.S)
    assert reply is not None
    links = re.findall(r'<a class="cite" href="#(item-\d+)">\[(m:[0-9a-f]+)\]</a>', reply.group(1))
    assert [short for _, short in links] == [world.short("lisbon")]
    assert re.sub(r"<[^>]+>", "", reply.group(1)) == searched.reply  # the text itself is unchanged
    cards = {anchor: (short, opened) for anchor, short, opened in CARD.findall(html)}
    assert cards[links[0][0]] == (world.short("lisbon"), " open")


def test_cited_cards_are_open_and_merely_available_ones_collapsed(world: World) -> None:
    html = page(world, world.alice, world.turn.pk)
    cited = {world.short("lisbon"), world.short("launch")}
    cards = CARD.findall(html)
    assert {short for _, short, _ in cards} >= cited | {world.short("tea")}
    for _, short, opened in cards:
        assert (opened == " open") == (short in cited), short
    assert TEA in html  # collapsed, not hidden: the statement is in the card's summary line


def test_a_citation_the_viewer_may_not_see_is_named_but_not_linked(world: World) -> None:
    """In a thread shared with an outside organisation the agent cites a memory learned there; Alice
    may open the turn, but the memory is above her ceiling: the summary names the citation (it is in
    the reply she can read) and says it cannot be shown, and nothing links to a card."""
    shared = {"kind": "external", "readers": ["U200", "U300"]}
    told = world.turn_in("partner", "U200", PARTNER, audience=shared)
    world.runtime.round(told, {"verb": "remember", "body": PARTNER})
    asked = world.turn_in("partner", "U200", "When does the partner contract renew?", audience=shared)
    (item,) = RecallTraceItem.objects.filter(trace__turn_id=asked)
    cited = item.revision.short_id
    assert world.runtime.reply(asked, f"In June [{cited}].").status_code == 201

    html = page(world, world.alice, asked)
    summary = section(html, "summary")
    why_not = "cannot be shown to you: it is not shared with you"
    assert f'<code class="mid">[{cited}]</code> <span class="muted why-not">{why_not}' in summary
    assert 'class="cite"' not in html and f"In June [{cited}]." in html and PARTNER not in html
    assert "<strong>1</strong> memory was in front of the agent; 0 of them can be shown to you." in summary


# --- the stricter of two ceilings, for messages ---------------------------------------------------


def test_a_recorded_message_the_viewer_may_not_see_never_appears_and_is_counted(world: World) -> None:
    """A search audit that lists Bob's DM line beside a #general line, on a #general turn Alice may
    open: the page shows the #general line and only counts Bob's, which is above the turn's own
    ceiling and Alice's alike (the same rule hides it however the row came to list it)."""
    runtime = world.runtime
    public = runtime.say("general", "U100", DEPLOY)
    private = runtime.say("dm-bob", "U300", "The atlas deploy worries me, keep this between us.")
    turn = runtime.turn("general", "U100", "When is the atlas deploy?")["turn_id"]
    ConversationSearchEvent.objects.create(
        agent=runtime.agent,
        turn_id=turn,
        destination_audience={"kind": "workspace"},
        selected=[{"message_id": public}, {"message_id": private}],
        returned_message_ids=[public, private],
    )

    html = page(world, world.alice, turn)
    history = section(html, "history")
    assert [int(m) for m in MESSAGE_ID.findall(history)] == [public]
    assert "keep this between us" not in html and f"/messages/{private}/" not in html
    assert "1 further past message was in front of the agent and is not shown here." in history
    assert world.client(world.alice).get(f"/messages/{private}/").status_code == 404  # nor anywhere else
    assert messages_within_ceilings(world.alice, Turn.objects.get(pk=turn), [public, private]) == {public}


def test_a_message_above_the_turns_own_ceiling_never_appears_even_where_the_viewer_could_see_it(
    world: World,
) -> None:
    """A #general line Alice may read anywhere else, recorded on a turn in a public thread: a public
    thread's search could never have been given it, and the view takes the minimum of both ceilings."""
    runtime = world.runtime
    workspace_line = runtime.say("general", "U100", DEPLOY)
    turn = world.turn_in("town-hall", "U200", "When is the atlas deploy?", audience={"kind": "public"})
    ConversationSearchEvent.objects.create(
        agent=runtime.agent,
        turn_id=turn,
        destination_audience={"kind": "public"},
        selected=[{"message_id": workspace_line}],
        returned_message_ids=[workspace_line],
    )
    assert world.client(world.alice).get(f"/messages/{workspace_line}/").status_code == 200

    history = section(page(world, world.alice, turn), "history")
    assert "data-message-id" not in history and DEPLOY not in history
    assert "1 further past message was in front of the agent and is not shown here." in history


def test_a_message_above_the_viewers_ceiling_is_counted_not_shown_though_the_search_was_right(world: World) -> None:
    """A thread shared with an outside organisation: its earlier line was rightly found by a search
    there, but it cannot be disclosed to a direct conversation with Alice, so her view of that turn
    omits it. The view takes the minimum of both ceilings, never the recall's alone."""
    shared = {"kind": "external", "readers": ["U200", "U300"]}
    said = world.runtime.say("partner", "U200", PARTNER, audience=shared)
    turn = world.turn_in("partner", "U200", "When does the partner contract renew?", audience=shared)
    response = world.runtime.round(turn, {"verb": "search_history", "query": "partner contract renews"})
    assert said in response.json()["results"][0]["result"]["message_ids"]  # it was in front of the agent

    history = section(page(world, world.alice, turn), "history")
    assert "data-message-id" not in history and PARTNER not in history
    assert f"{len(response.json()['results'][0]['result']['message_ids'])} further past message" in history
    assert messages_within_ceilings(world.alice, Turn.objects.get(pk=turn), [said]) == set()
