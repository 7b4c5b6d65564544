"""An operator in real headless Chromium: log in, open the pending sharing request from the review
queue, approve it with the admin action, and the memory reaches the channel turn it was requested
for. Then amend the memory and preview the channel turn, saving screenshots of both pages."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from accounts.models import OperatorScope
from history.models import Turn
from memory.models import MemoryRevision, SharingRequest, SharingState, parse_short_id
from tests.admin.test_admin_pages import APPS
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
