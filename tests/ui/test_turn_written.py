"""What a turn wrote, on that turn's page: every committed operation of its ledger, each memory with its
card and the correction form, under the same two ceilings as what was recalled; a reply's citation of
a memory it wrote lands on that card; the messages the runtime loaded itself are listed."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import EntryStatus, MemoryEntry, MemoryOperation, Operation, Rejection
from tests.ui.conftest import LISBON, TEA, World, assert_valid_html, remember

pytestmark = pytest.mark.django_db

PARTNER = "The partner contract renews in June."
OPERATION = re.compile(r'<li class="operation" data-operation="(\w+)">(.*?)</li>\s*</ol>\s*</li>', re.S)


def page(world: World, user: object, turn_id: int) -> str:
    response = world.client(user).get(f"/turns/{turn_id}/")  # type: ignore[arg-type]
    assert response.status_code == 200, response.status_code
    html = response.content.decode()
    assert_valid_html(html)
    return html


def written_section(html: str) -> str:
    found = re.search(r'<section class="written" id="written"(.*?)</section>', html, re.S)
    assert found is not None, "the page has no section for what the turn wrote"
    return found.group(1)


def told_turn(world: World) -> int:
    """Alice's turn in her DM in which the agent remembered four things about her."""
    return MemoryOperation.objects.get(revision=world.revisions["lisbon"]).turn_id or 0


def test_the_page_lists_every_operation_the_turn_committed_each_with_its_card(world: World) -> None:
    turn_id = told_turn(world)
    written = written_section(page(world, world.alice, turn_id))
    ledger = MemoryOperation.objects.filter(turn_id=turn_id).order_by("id")
    assert re.findall(r'data-operation="(\w+)"', written) == [op.kind for op in ledger] == ["remember"] * 4
    cards = re.findall(
        r'data-memory-id="(m:[0-9a-f]+)" data-moments="([\w ]*)">\s*<details class="card memory"( open)?', written
    )
    assert [short for short, _, _ in cards] == [op.revision.short_id for op in ledger]  # type: ignore[union-attr]
    assert all("written" in moments.split() and opened == " open" for _, moments, opened in cards)
    lisbon = world.revisions["lisbon"]
    assert f'action="/turns/{turn_id}/memories/{lisbon.pk}/reject/"' in written
    assert "This memory is about you, so your correction applies directly." in written
    assert LISBON in written and TEA in written


def test_the_subject_corrects_a_memory_the_turn_wrote_from_its_page(world: World) -> None:
    turn_id = told_turn(world)
    lisbon = world.revisions["lisbon"]
    response = world.client(world.alice).post(
        f"/turns/{turn_id}/memories/{lisbon.pk}/reject/",
        {"kind": "changed", "correction": "Lives in Porto since May."},
        follow=True,
    )
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == f"/turns/{turn_id}/#memory-{lisbon.pk}"
    assert f"Corrected [{lisbon.short_id}]" in response.content.decode()
    entry = MemoryEntry.objects.select_related("current_revision").get(pk=lisbon.entry_id)
    assert entry.current_revision is not None and entry.current_revision.body == "Lives in Porto since May."
    rejection = Rejection.objects.get(revision=lisbon)
    assert rejection.trace_item_id is None and rejection.kind == "changed" and rejection.relation == "subject"
    after = written_section(page(world, world.alice, turn_id))
    assert f"since changed: [{entry.current_revision.short_id}]" in after


def test_only_people_who_may_see_the_turn_reach_the_form(world: World) -> None:
    """Bob cannot open Alice's DM, so he cannot correct what was written there; a revision the turn
    did not write is not on its page either. Nothing changes."""
    turn_id = told_turn(world)
    lisbon, launch = world.revisions["lisbon"], world.revisions["launch"]
    refused = world.client(world.bob).post(f"/turns/{turn_id}/memories/{lisbon.pk}/reject/", {"kind": "not_true"})
    assert refused.status_code == 404
    unrelated = world.client(world.alice).post(f"/turns/{turn_id}/memories/{launch.pk}/reject/", {"kind": "not_true"})
    assert unrelated.status_code == 404
    assert not Rejection.objects.exists()
    assert MemoryEntry.objects.get(pk=lisbon.entry_id).status != EntryStatus.FORGOTTEN


def test_a_memory_written_above_the_viewers_ceiling_is_named_never_shown(world: World) -> None:
    """In a thread shared with an outside organisation the agent remembers something; Alice may open
    the turn, but the memory is above her own ceiling: the operation is listed, its text is not, and
    the form's address for it answers 404."""
    shared = {"kind": "external", "readers": ["U200", "U300"]}
    told = world.turn_in("partner", "U200", PARTNER, audience=shared)
    world.runtime.round(told, {"verb": "remember", "body": PARTNER})
    (operation,) = MemoryOperation.objects.filter(turn_id=told)

    written = written_section(page(world, world.alice, told))
    assert 'data-operation="remember"' in written and "a memory that cannot be shown to you here" in written
    assert PARTNER not in written and "data-memory-id" not in written
    refused = world.client(world.alice).post(
        f"/turns/{told}/memories/{operation.revision_id}/reject/", {"kind": "not_true"}
    )
    assert refused.status_code == 404 and not Rejection.objects.exists()


def test_a_reply_citing_what_the_turn_wrote_links_to_its_card(world: World) -> None:
    """Sam's case: the agent writes a memory and cites it in the same reply; the citation lands on
    the written card, which carries the correction form."""
    runtime = world.runtime
    asked = runtime.turn("dm-alice", "U200", "I'm off next Friday, please move our sync to Thursday.")["turn_id"]
    (noted,) = remember(
        runtime,
        asked,
        {"body": "Is off on Fridays.", "belief_type": "user_model_attr", "subject": "speaker"},
    )
    assert (
        runtime.reply(asked, f"Moved to Thursday; I noted that you are off on Fridays [{noted.short_id}].").status_code
        == 201
    )

    html = page(world, world.alice, asked)
    summary = re.search(r'<section class="summary card" id="summary"(.*?)</section>', html, re.S)
    assert summary is not None
    assert (
        f'<a class="cite" href="#memory-{noted.pk}">[{noted.short_id}]</a> <bdi>Is off on Fridays.</bdi>'
        in summary.group(1)
    )
    assert (
        f'<li class="item" id="memory-{noted.pk}" data-memory-id="{noted.short_id}" data-moments="written">'
        in written_section(html)
    )
    assert "cannot be shown" not in summary.group(1)
    assert MemoryOperation.objects.get(turn_id=asked).kind == Operation.REMEMBER

    # On Alice's "what the agent knows about you", the memory names the turn that wrote and cited it.
    about = world.client(world.alice).get("/about-you/").content.decode()
    card = about[about.index(f'data-memory-id="{noted.short_id}"') :]
    card = card[: card.index("</article>")] if "</article>" in card else card
    used = re.search(rf'<li data-turn-id="{asked}">(.*?)</li>', card, re.S)
    assert used is not None, "the turn that wrote it is listed under the memory"
    assert 'data-moment="written"' in used.group(1) and 'class="badge used"' in used.group(1)


def test_the_messages_the_runtime_loaded_are_listed(world: World) -> None:
    runtime = world.runtime
    window = [runtime.say("dm-alice", "U200", "Earlier, about tea."), runtime.say("dm-alice", "U200", "And Lisbon.")]
    turn = runtime.turn("dm-alice", "U200", "What do you know about me?", loaded_message_ids=window)["turn_id"]
    html = page(world, world.alice, turn)
    loaded = re.search(r'<section class="loaded" id="loaded"(.*?)</section>', html, re.S)
    assert loaded is not None
    assert [int(m) for m in re.findall(r'data-message-id="(\d+)"', loaded.group(1))] == window
    assert "Earlier, about tea." in loaded.group(1) and "And Lisbon." in loaded.group(1)


def test_the_pages_query_count_does_not_grow_with_what_the_turn_wrote(world: World) -> None:
    """Each card's facts are read for all cards at once: two memories or six, the same statements."""
    runtime = world.runtime

    def turn_writing(count: int) -> int:
        turn = runtime.turn("dm-alice", "U200", f"Here are {count} things about me.")["turn_id"]
        remember(
            runtime,
            turn,
            *(
                {"body": f"Fact {count}-{n} about Alice.", "belief_type": "user_model_attr", "subject": "speaker"}
                for n in range(count)
            ),
        )
        assert runtime.reply(turn, "Noted.").status_code == 201
        return int(turn)

    small, large = turn_writing(2), turn_writing(6)
    client = world.client(world.alice)
    counts = []
    for turn in (small, large):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/turns/{turn}/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts
