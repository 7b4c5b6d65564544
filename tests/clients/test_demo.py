"""The demo shows the flagship view on first run: ``load_demo`` drives real turns for Priya and Sam
through the API with the scripted agent (one leaves a memory worth correcting), Priya sees hers in
Chromium, and ``demo_api_key`` issues the key the run banner prints (only where the demo is loaded; a
runtime key, or with ``--manage`` one that may also read the memory list)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.models import ApiKey
from demo.management.commands.load_demo import DEMO_PASSWORD
from history.models import Turn
from memory.models import MemoryRevision
from tests.browser import screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def _key(*args: str) -> str:
    out = StringIO()
    call_command("demo_api_key", *args, stdout=out)
    return out.getvalue().strip()


def test_the_demo_load_drives_real_turns_for_priya_and_sam() -> None:
    call_command("load_demo", stdout=StringIO())
    turns = Turn.objects.select_related("inbound_message__actor").order_by("pk")
    assert [(t.inbound_message.actor and t.inbound_message.actor.external_id, t.state) for t in turns] == [
        ("U01PRIYA", "delivered"),
        ("U01PRIYA", "delivered"),
        ("U03SAMLI", "delivered"),
        ("U03SAMLI", "delivered"),
        ("U03SAMLI", "delivered"),
    ]
    assert all(t.reply is not None and t.reply.body for t in turns)
    assert turns[0].reply is not None and turns[0].reply.cited_revision_ids  # the launch date, cited
    inferred = MemoryRevision.objects.get(body="Does not work on Fridays.")
    assert inferred.authority == "inferred" and inferred.turn_id == turns[4].pk
    assert not ApiKey.objects.filter(label="demo turns", revoked_at__isnull=True).exists()


def test_the_demo_api_key_works_and_replaces_the_previous_one() -> None:
    assert _key() == ""  # no demo workspace, no key
    call_command("load_demo", stdout=StringIO())
    first, second = _key(), _key()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {second}")
    assert client.get("/api/v1/tools").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {first}")
    assert client.get("/api/v1/tools").status_code == 401


def test_the_demo_key_is_a_runtime_key_unless_manage_is_asked_for() -> None:
    """The banner's key may not read the memory list; ``--manage`` issues a key that may, and leaves the
    banner's key valid."""
    call_command("load_demo", stdout=StringIO())
    banner, manage = _key(), _key("--manage")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {banner}")
    refused = client.get("/api/v1/memories")
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
    assert client.get("/api/v1/tools").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {manage}")
    assert client.get("/api/v1/memories").status_code == 200
    assert client.get("/api/v1/tools").status_code == 200


@pytest.mark.browser
def test_priya_sees_the_demo_turns_in_chromium(page: Any, live_server: Any) -> None:
    call_command("load_demo", stdout=StringIO())
    base = live_server.url
    page.goto(f"{base}/turns/")
    page.fill("#id_username", "priya")
    page.fill("#id_password", DEMO_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")
    said = page.locator(".turn-said").all_inner_texts()
    assert len(said) == 2 and all(text.startswith("Priya Raman:") for text in said)
    assert any("time zone" in text for text in said) and not any("palette" in text for text in said)
    page.locator(".turn-link").first.click()
    assert page.locator("h1").inner_text() == "What did the agent know?"
    screenshot(page, "demo-turn")
