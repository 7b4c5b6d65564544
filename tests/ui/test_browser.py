"""The end user's surface in real headless Chromium: log in, open a turn, see what the agent knew
(used / available), correct what is hers three ways, report what is not hers for review, and find
the rejected beliefs gone from the next recall and after a reindex; another user gets a 404 for the
same page."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from memory.embeddings.index import vectors_stored
from memory.models import RecallTraceItem, Rejection
from tests.browser import screenshot
from tests.ui.conftest import PASSWORD, QUESTION, World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/turns/")
    assert page.url.startswith(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")


def card(page: Any, memory_id: str, moment: str | None = None) -> Any:
    marked = f'[data-moments~="{moment}"]' if moment else ""
    return page.locator(f'li[data-memory-id="{memory_id}"]{marked}').first


def reject(page: Any, memory_id: str, button: str, *, moment: str | None = None, correction: str = "") -> str:
    """Open the item's "is something wrong" panel, apply one kind, return the confirmation shown."""
    item = card(page, memory_id, moment)
    if item.locator("details.memory").get_attribute("open") is None:  # merely available: collapsed
        item.locator("summary.card-head").click()
    item.locator("details.reject > summary").click()
    if correction:
        item.locator("textarea").fill(correction)
    with page.expect_navigation():
        item.get_by_role("button", name=button).click()
    return str(page.locator(".flash").first.inner_text())


def recalled_in_new_turn(world: World) -> set[int]:
    """Everything in front of the model for a fresh turn in Alice's DM: its snapshot and in-turn recall."""
    turn = world.runtime.turn("dm-alice", "U200", QUESTION)
    traced = RecallTraceItem.objects.filter(trace__session_id=turn["session_id"]).values_list("revision_id", flat=True)
    in_turn = {item["revision_id"] for item in turn["recall"]["items"]}
    return set(traced) | in_turn


def test_a_user_sees_what_the_agent_knew_and_corrects_it(live_world: World, page: Any, live_server: Any) -> None:
    world, base = live_world, live_server.url
    lisbon, tea, manager, launch = (world.short(k) for k in ("lisbon", "tea", "manager", "launch"))
    log_in(page, base, "alice")

    page.locator(f'a[href="/turns/{world.turn.pk}/"]').click()
    page.wait_for_url(f"{base}/turns/{world.turn.pk}/")
    assert page.locator("h1").inner_text() == "What did the agent know?"
    assert page.locator("ul.moments .moment").all_inner_texts() == ["Session snapshot", "In-turn recall"]
    assert card(page, lisbon).locator(".badge.used").count() == 1
    assert card(page, launch, "in_turn").locator(".badge.used").count() == 1
    assert card(page, tea).locator(".badge.available").count() == 1
    assert card(page, manager).locator(".badge.available").count() == 1
    assert "withheld by the safety scan" in page.locator('.aggregate[data-moment="snapshot"]').inner_text()
    screenshot(page, "turn-view")

    page.set_viewport_size(PHONE)
    card(page, tea).locator("summary.card-head").click()
    card(page, tea).locator("details.reject > summary").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # nothing overflows sideways
    screenshot(page, "turn-view-phone")
    page.set_viewport_size(DESKTOP)
    page.reload()

    assert reject(page, lisbon, "Not true").startswith(f"Retired [{lisbon}]")
    changed = reject(page, tea, "Save the correction", correction="Drinks black coffee now.")
    assert changed.startswith(f"Corrected [{tea}]: superseded by [m:")
    # The launch date is Victor's workspace fact: Alice is told her choice goes to review, and it does.
    notice = card(page, launch, "in_turn").locator(".review-notice").text_content()
    assert notice is not None and "sent to an operator for review" in notice
    reported = reject(page, launch, "Report: true elsewhere, not here", moment="in_turn")
    assert reported.startswith(f"Reported [{launch}] for review") and "nothing was changed" in reported
    assert reject(page, manager, "Something's wrong").startswith(f"Flagged [{manager}] for review")
    assert Rejection.objects.filter(user=world.alice).count() == 4
    assert card(page, lisbon).locator(".badge.gone").inner_text() == "since retired"
    assert card(page, tea).locator(".badge.gone").inner_text().startswith("since changed: [m:")
    assert card(page, lisbon).locator("details.reject").count() == 0  # nothing left to reject on a retired belief
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "turn-view-corrected")

    gone = {world.revisions[k].pk for k in ("lisbon", "tea")}
    assert not recalled_in_new_turn(world) & gone
    assert world.revisions["manager"].pk in recalled_in_new_turn(world)  # flagged, not retired
    if vectors_stored():  # a reindex replays the rejections too (no embeddings without pgvector)
        call_command("embeddings", "rebuild")
    assert not world.recall_ids("dm-alice", "U200", QUESTION) & gone
    assert not recalled_in_new_turn(world) & gone

    page.locator("header").get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{base}/login/")
    log_in(page, base, "bob")
    response = page.goto(f"{base}/turns/{world.turn.pk}/")
    assert response is not None and response.status == 404
    assert page.locator(f'a[href="/turns/{world.turn.pk}/"]').count() == 0
