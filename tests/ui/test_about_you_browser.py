""" "What the agent knows about you" in real headless Chromium: Alice signs in, follows the header link,
finds the memory about her, corrects it, and sees the corrected statement with its new id."""

from __future__ import annotations

from typing import Any

import pytest

from memory.models import MemoryEntry
from tests.browser import screenshot
from tests.ui.about_world import OWNS, AboutWorld, build_about_world
from tests.ui.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def live_world(transactional_db: None) -> AboutWorld:
    return build_about_world()


def test_she_follows_the_header_link_finds_a_memory_about_her_and_corrects_it(
    live_world: AboutWorld, page: Any, live_server: Any
) -> None:
    world, base = live_world, live_server.url
    owns = world.revisions["owns"]
    page.goto(f"{base}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")

    page.locator("header").get_by_role("link", name="What the agent knows about you").click()
    page.wait_for_url(f"{base}/about-you/")
    assert page.locator("h1").inner_text() == "What the agent knows about you"
    card = page.locator(f'li[data-memory-id="{owns.short_id}"]')
    assert card.locator(".statement").inner_text() == OWNS
    assert card.locator(".said-by-whom").inner_text() == "Victor (id U100)"
    assert card.locator(".used-turns .badge.used").count() == 1
    screenshot(page, "about-you")

    page.fill("#id_q", "billing")
    with page.expect_navigation():
        page.get_by_role("button", name="Search").click()
    assert page.locator("li[data-memory-id]").count() == 1

    card.locator("details.reject > summary").click()
    card.locator("textarea").fill("Owns the billing and invoicing migration.")
    with page.expect_navigation():
        card.get_by_role("button", name="Save the correction").click()
    flash = page.locator(".flash").first.inner_text()
    new = MemoryEntry.objects.get(pk=owns.entry_id).current_revision
    assert new is not None and new.body == "Owns the billing and invoicing migration."
    assert flash == f"Corrected [{owns.short_id}]: superseded by [{new.short_id}], valid from now."
    corrected = page.locator(f'li[data-memory-id="{new.short_id}"]')
    assert corrected.locator(".statement").inner_text() == "Owns the billing and invoicing migration."
    assert page.locator(f'li[data-memory-id="{owns.short_id}"]').count() == 0

    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # nothing overflows sideways
    screenshot(page, "about-you-corrected-phone")
