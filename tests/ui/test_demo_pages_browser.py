"""The demo, as its people see it in Chromium: Priya's first answer cites the beta launch memory and
its citation lands on that card; Sam corrects the memory the agent wrote in his turn ("does not work
on Fridays", from one Friday off) on that turn's own page. The screenshots are the ones in docs/."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from demo.management.commands.load_demo import DEMO_PASSWORD
from history.models import Turn
from memory.models import MemoryEntry, MemoryOperation, MemoryRevision, Operation
from tests.browser import screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

CORRECTION = "Is off on Friday 11 December only; works other Fridays."


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login/?next=/turns/")
    page.fill("#id_username", username)
    page.fill("#id_password", DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")


def test_priyas_first_answer_cites_the_beta_launch_memory(page: Any, live_server: Any) -> None:
    call_command("load_demo", stdout=StringIO())
    first = Turn.objects.filter(inbound_message__actor__external_id="U01PRIYA").order_by("pk").first()
    assert first is not None and first.reply is not None
    log_in(page, live_server.url, "priya")
    page.goto(f"{live_server.url}/turns/{first.pk}/")
    citations = page.locator("section.summary .citations li")
    assert citations.count() == 1
    assert "beta launches" in citations.inner_text()
    page.locator("blockquote.reply a.cite").first.click()
    landed = page.locator("li.item:target")
    assert "beta launches" in landed.locator(".statement").inner_text()
    screenshot(page, "turn-page")


def test_sam_corrects_the_memory_written_in_his_turn_from_that_turns_page(page: Any, live_server: Any) -> None:
    call_command("load_demo", stdout=StringIO())
    (written,) = MemoryOperation.objects.filter(kind=Operation.REMEMBER, turn__isnull=False).select_related(
        "revision", "turn"
    )
    assert written.revision is not None and written.turn is not None
    short = written.revision.short_id
    log_in(page, live_server.url, "sam")
    page.goto(f"{live_server.url}/turns/{written.turn_id}/")

    # The reply's citation is on the page: a card in "What the agent wrote or changed", open.
    summary = page.locator("section.summary .citations").inner_text()
    assert short in summary and "cannot be shown" not in summary
    card = page.locator(f'section.written li[data-memory-id="{short}"]')
    assert card.locator("details.memory").get_attribute("open") is not None
    assert "This memory is about you" in card.locator(".who").text_content()

    current = correct_on_page(page, card, short, written.entry_id)
    assert f"since changed: [{current.short_id}]" in page.locator(f'li[data-memory-id="{short}"]').inner_text()


def test_sam_corrects_the_same_memory_on_his_about_you_page(page: Any, live_server: Any) -> None:
    call_command("load_demo", stdout=StringIO())
    (written,) = MemoryOperation.objects.filter(kind=Operation.REMEMBER, turn__isnull=False).select_related("revision")
    assert written.revision is not None
    short = written.revision.short_id
    log_in(page, live_server.url, "sam")
    page.locator("header").get_by_role("link", name="What the agent knows about you").click()
    page.wait_for_url(f"{live_server.url}/about-you/")

    card = page.locator(f'li[data-memory-id="{short}"]')
    assert card.locator(".statement").inner_text() == written.revision.body
    # It names the turn that wrote it and cited it, which Sam may open.
    assert card.locator(f'.used-turns li[data-turn-id="{written.turn_id}"] .badge.used').count() == 1
    current = correct_on_page(page, card, short, written.entry_id)
    corrected = page.locator(f'li[data-memory-id="{current.short_id}"]')
    assert corrected.locator(".statement").inner_text() == CORRECTION


def correct_on_page(page: Any, card: Any, short: str, entry_id: int) -> MemoryRevision:
    """Correct the memory of ``card`` with CORRECTION through its form, as the person would; the page
    confirms it by id and the entry's current revision, returned, now says CORRECTION."""
    card.locator("details.reject > summary").click()
    card.locator("textarea").fill(CORRECTION)
    with page.expect_navigation():
        card.get_by_role("button", name="Save the correction").click()
    assert page.locator(".flash").first.inner_text().startswith(f"Corrected [{short}]")
    entry = MemoryEntry.objects.select_related("current_revision").get(pk=entry_id)
    assert entry.current_revision is not None and entry.current_revision.body == CORRECTION
    return entry.current_revision
