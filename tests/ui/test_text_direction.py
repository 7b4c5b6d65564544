"""A right-to-left override (U+202E) in a message, a statement or a name must not reverse the rest of
the line it is shown in: every piece of user or model text on the pages people see sits in an element
that isolates its direction (``<bdi>``, or ``dir="auto"`` on its own block)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.ui.conftest import PASSWORD, World, assert_valid_html, build_world, remember

RLO = "\u202e"
REVERSED = f"Ship it {RLO}tomorrow at noon"


def _spoofed_turn(world: World) -> int:
    runtime = world.runtime
    turn = runtime.turn("dm-alice", "U200", REVERSED)["turn_id"]
    remember(runtime, turn, {"body": f"Prefers {RLO}short replies.", "belief_type": "preference", "subject": "speaker"})
    assert runtime.reply(turn, f"Noted {RLO}done.").status_code == 201
    return int(turn)


@pytest.mark.django_db
def test_user_and_model_text_is_isolated_on_every_page(world: World) -> None:
    turn = _spoofed_turn(world)
    client = world.client(world.alice)
    for path in ("/turns/", f"/turns/{turn}/"):
        html = client.get(path).content.decode()
        assert_valid_html(html)
        assert RLO in html
        for line in html.splitlines():
            if RLO in line:
                # Every override sits inside an isolating element that closes on the same line.
                isolated = re.sub(r"<bdi[^>]*>[^<]*</bdi>", "", line)
                isolated = re.sub(r'<(blockquote|p|div)[^>]*dir="auto"[^>]*>.*?</\1>', "", isolated)
                assert RLO not in isolated, (path, line)


@pytest.mark.browser
def test_an_override_in_a_message_does_not_reverse_the_turn_list_line(
    page: Any, live_server: Any, transactional_db: None
) -> None:
    world = build_world()
    _spoofed_turn(world)
    base = live_server.url
    page.goto(f"{base}/login/?next=/turns/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")
    said = page.locator(".turn-said").first
    assert RLO in said.inner_text()
    # The message sits in an element Chromium lays out as an isolate: the override ends with it.
    message = said.locator("bdi", has_text="tomorrow at noon")
    assert message.count() == 1
    assert message.evaluate("element => getComputedStyle(element).unicodeBidi") == "isolate"
