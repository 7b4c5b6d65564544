"""The turn page's summary in real headless Chromium: Alice opens a turn whose agent searched its
history, reads the summary, follows the reply's citation to its card on the same page, and opens a
collapsed memory card and a collapsed past message."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import screenshot
from tests.ui.conftest import LISBON, TEA, World
from tests.ui.test_browser import card, log_in
from tests.ui.test_turn_summary import DEPLOY, searched_turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_user_follows_a_citation_to_its_card_and_opens_collapsed_cards(
    live_world: World, page: Any, live_server: Any
) -> None:
    world, base = live_world, live_server.url
    searched = searched_turn(world)
    lisbon, tea = world.short("lisbon"), world.short("tea")
    log_in(page, base, "alice")
    page.goto(f"{base}/turns/{searched.turn_id}/")

    summary = page.locator("section.summary")
    expect(summary.locator("h2")).to_have_text("In short")
    expect(summary.locator(".count-memories")).to_contain_text("memories were in front of the agent")
    expect(summary.locator(".count-messages")).to_contain_text("found by its history search")
    expect(summary.locator(".citations li")).to_have_text(f"[{lisbon}] {LISBON}")
    screenshot(page, "turn-summary")

    citation = page.locator("blockquote.reply a.cite")
    expect(citation).to_have_text(f"[{lisbon}]")
    target = str(citation.get_attribute("href"))
    citation.click()
    page.wait_for_function("hash => location.hash === hash", arg=target)
    landed = page.locator(f"li{target}")
    expect(landed).to_have_attribute("data-memory-id", lisbon)
    expect(landed).to_be_in_viewport()
    expect(landed.locator("details.memory")).to_have_attribute("open", "")  # cited: open
    assert page.evaluate("document.querySelector(':target').id") == target.removeprefix("#")
    expect(landed.locator("dl.facts")).to_be_visible()

    available = card(page, tea)
    expect(available.locator("summary.card-head")).to_contain_text(TEA)  # collapsed, yet it says what it is
    expect(available.locator("dl.facts")).to_be_hidden()
    available.locator("summary.card-head").click()
    expect(available.locator("details.memory")).to_have_attribute("open", "")
    expect(available.locator("dl.facts")).to_be_visible()

    message = page.locator(f'li[data-message-id="{searched.deploy}"]')
    expect(message.locator("blockquote.said")).to_be_hidden()
    message.locator("summary.card-head").click()
    expect(message.locator("blockquote.said")).to_have_text(DEPLOY)
    expect(message.get_by_role("link", name="Open this message")).to_be_visible()
    screenshot(page, "turn-summary-opened")
