"""An operator in real headless Chromium: log in, open the pending sharing request from the review
queue, approve it with the admin action, and the memory reaches the channel turn it was requested
for. Then amend the memory and preview the channel turn, saving screenshots of both pages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from accounts.models import OperatorScope
from history.models import Turn
from memory.models import MemoryEntry, MemoryRevision, SharingRequest, SharingState, parse_short_id
from memory.services import Belief, Provenance, memory_remember
from tests.admin.test_admin_pages import APPS, build_world
from tests.api.conftest import NAMES, Runtime, runtime_for
from tests.browser import screenshot
from tests.factories import AgentFactory

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("transactional_db")]


def recalled_ids(runtime: Runtime, turn_id: int, query: str) -> list[str]:
    body = runtime.round(turn_id, {"verb": "recall", "query": query}).json()
    return [item["id"] for item in body["results"][0]["result"]["items"]]


def test_operator_approves_a_sharing_request_in_the_browser(page: Any, live_server: Any) -> None:
    runtime = runtime_for(AgentFactory.create())
    for person in NAMES:
        runtime.say("general", person, "Morning all")
    private = runtime.turn("dm-alice", "U200", "The offsite is in Porto; you can tell #general.")
    made = runtime.round(private["turn_id"], {"verb": "remember", "body": "The offsite is in Porto."}).json()
    memory_id = made["results"][0]["result"]["id"]
    runtime.round(
        private["turn_id"],
        {"verb": "request_memory_sharing", "id": memory_id, "conversation_id": runtime.conversation("general").pk},
    )
    sharing = SharingRequest.objects.get()
    channel = runtime.turn("general", "U300", "Where is the offsite?")
    assert memory_id not in recalled_ids(runtime, channel["turn_id"], "offsite Porto")

    operator = User.objects.create_user("operator", password="correct horse", is_staff=True)
    operator.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    OperatorScope.objects.create(user=operator, tenant_id=runtime.agent.tenant_id)

    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.click("text=Pending sharing requests")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 1
    page.check(f"input[name=_selected_action][value='{sharing.pk}']")
    page.select_option("select[name=action]", "approve_requests")
    page.click("button[name=index]")
    page.wait_for_selector("text=Approved 1 request(s).")

    sharing.refresh_from_db()
    assert sharing.state == SharingState.APPROVED
    assert sharing.decided_by_user_id == operator.pk
    assert memory_id in recalled_ids(runtime, channel["turn_id"], "offsite Porto")

    # "Retrieve as this turn": the channel turn now gets the released memory.
    turn = Turn.objects.get(pk=channel["turn_id"])
    page.goto(f"{live_server.url}/admin/history/turn/{turn.pk}/change/")
    page.click("text=Retrieve as this turn")
    page.wait_for_selector("#rendered-block")
    assert "The offsite is in Porto." in page.locator("#rendered-block").inner_text()
    assert memory_id in page.locator("#preview-items").inner_text()
    screenshot(page, "admin-preview")

    # The inspector: amend the memory from its page, then read its history.
    revision_id = parse_short_id(memory_id)
    assert revision_id is not None
    entry_id = MemoryRevision.objects.get(pk=revision_id).entry_id
    page.goto(f"{live_server.url}/admin/memory/memoryentry/{entry_id}/change/")
    page.click("text=Amend this memory")
    page.fill("#id_body", "The offsite is in Porto, in the first week of May.")
    page.click("input[name=_save]")
    page.wait_for_selector("text=is now current")
    history = page.locator("#revision-history tbody tr")
    assert history.count() == 2
    assert "first week of May" in history.nth(0).inner_text()
    assert "Operator edit by operator" in history.nth(0).inner_text()
    assert "The offsite is in Porto." in history.nth(1).inner_text()
    assert page.locator("#sharing-grants").get_by_role("button", name="Revoke").count() == 1
    screenshot(page, "admin-entry")

    # The grant released revision 1 only; the amendment was made under the private audience.
    page.goto(f"{live_server.url}/admin/history/turn/{turn.pk}/preview/")
    assert "Porto" not in page.locator("#rendered-block").inner_text()


def log_in_operator(page: Any, live_server: Any, tenant_id: int) -> None:
    operator = User.objects.create_user("operator", password="correct horse", is_staff=True)
    operator.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    OperatorScope.objects.create(user=operator, tenant_id=tenant_id)
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_selector("#review-queues")


def search_memories(page: Any, live_server: Any, term: str) -> None:
    page.goto(f"{live_server.url}/admin/memory/memoryentry/")
    page.fill("#searchbar", term)
    page.press("#searchbar", "Enter")
    page.wait_for_selector(f"#searchbar[value='{term}']")


def test_an_operator_finds_a_memory_by_its_m_id_and_lands_on_its_page(page: Any, live_server: Any) -> None:
    """ "m:… is wrong": the operator pastes the id an old citation showed into the memory search, opens
    the one memory it finds and is on that memory's page; its entry id finds the same memory, and the
    same digits read as an entry id find a different one."""
    world = build_world("acme")
    old, current = MemoryRevision.objects.filter(entry=world.entry).order_by("number")
    other = MemoryEntry.objects.exclude(pk=world.entry.pk).get(agent=world.agent)
    log_in_operator(page, live_server, world.tenant.pk)

    search_memories(page, live_server, old.short_id)
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    assert current.short_id in rows.first.inner_text()
    rows.first.locator("th a").click()
    page.wait_for_url(re.compile(rf"/admin/memory/memoryentry/{world.entry.pk}/change/"))
    assert page.locator("#content h2").first.inner_text() == f"{current.short_id} (live)"
    assert "Prefers green tea over coffee." in page.locator("#revision-history").inner_text()

    search_memories(page, live_server, str(other.pk))
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1
    rows.first.locator("th a").click()
    page.wait_for_url(re.compile(rf"/admin/memory/memoryentry/{other.pk}/change/"))
    assert "The team ships on Thursdays." in page.locator("#revision-history").inner_text()


def test_the_memory_list_fits_a_1280_pixel_screen(page: Any, live_server: Any) -> None:
    """At 1,280 px every column of the memory list, Status and Flagged included, is on screen: no
    header ends past the viewport or past the list's own box (which would hide it under the filters
    behind a sideways scroll), and neither the page nor the list scrolls sideways."""
    world = build_world("acme")
    for n in range(3):
        memory_remember(
            agent=world.agent,
            belief=Belief(
                body=f"Memory {n}: " + "a long statement about the quarterly planning offsite and its agenda " * 4,
                subject_id=world.alice.pk,
            ),
            provenance=Provenance(source_message_id=world.message.pk),
        )
    log_in_operator(page, live_server, world.tenant.pk)
    page.goto(f"{live_server.url}/admin/memory/memoryentry/")
    page.wait_for_selector("#result_list")
    assert page.viewport_size["width"] == 1280
    screenshot(page, "admin-memory-list-1280")
    headers = page.eval_on_selector_all(
        "#result_list thead th",
        "cells => cells.map(c => [c.innerText.trim(), c.getBoundingClientRect().right])",
    )
    names = [name for name, _ in headers]
    assert "STATUS" in names and "FLAGGED" in names
    box = page.eval_on_selector(
        "#changelist-form .results",
        "r => ({right: r.getBoundingClientRect().right, scroll: r.scrollWidth, client: r.clientWidth})",
    )
    assert box["right"] <= 1280
    assert [name for name, right in headers if right > box["right"]] == []
    assert box["scroll"] <= box["client"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


def test_a_right_to_left_override_in_a_name_does_not_reverse_what_follows_it(page: Any, live_server: Any) -> None:
    """On the memory's page its readers read "Alice (id …), Bob (id …)": with U+202E in Alice's name, Bob
    still renders after Alice on the same line, not pulled into her reversed run."""
    world = build_world("acme")
    world.alice.display_name = "Alice\u202e"
    world.alice.save()
    log_in_operator(page, live_server, world.tenant.pk)
    page.goto(f"{live_server.url}/admin/memory/memoryentry/{world.entry.pk}/change/")
    readers = page.locator(".field-readers .readonly bdi")
    assert readers.count() == 2
    alice, bob = readers.nth(0).bounding_box(), readers.nth(1).bounding_box()
    assert alice is not None and bob is not None
    assert "Alice" in readers.nth(0).inner_text() and "Bob" in readers.nth(1).inner_text()
    assert bob["y"] == alice["y"] and bob["x"] >= alice["x"] + alice["width"]
