"""The front door and the 404 page in real headless Chromium: a visitor reads the landing page and
follows its sign-in link; once signed in, ``/`` lands on her turns; an unknown address shows the
site's 404 page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.browser import screenshot
from tests.ui.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_visitor_reads_the_landing_page_and_signs_in_to_her_turns(page: Any, live_server: Any) -> None:
    """Signed out, ``/`` is the landing page with its four links; signing in from it, then opening ``/``
    again, lands on the turns list."""
    User.objects.create_user("frontdoor", password=PASSWORD)
    base = live_server.url

    response = page.goto(f"{base}/")
    assert response.status == 200
    assert page.url == f"{base}/"
    assert page.locator("h1").inner_text() == "Engram"
    start = page.get_by_role("navigation", name="Start here").get_by_role("link")
    assert [link.get_attribute("href") for link in start.all()] == ["/login/", "/admin/", "/api/docs/", "/api/"]
    screenshot(page, "front-door")

    page.get_by_role("link", name="Sign in to see your turns").click()
    page.wait_for_url(f"{base}/login/")
    page.fill("#id_username", "frontdoor")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/turns/")

    page.goto(f"{base}/")
    assert page.url == f"{base}/turns/"
    assert page.locator("h1").inner_text() == "Your turns"
    page.get_by_role("link", name="Engram").click()  # the brand is the front door, which sends her back here
    page.wait_for_url(f"{base}/turns/")


def test_an_unknown_address_shows_the_sites_404_page(page: Any, live_server: Any) -> None:
    """An address no route matches answers 404 with a page in the site's style that leads back to ``/``."""
    base = live_server.url
    response = page.goto(f"{base}/no/such/page/")
    assert response.status == 404
    assert page.locator("h1").inner_text() == "Not found"
    assert page.locator("header.site .brand").is_visible()
    screenshot(page, "not-found")

    page.get_by_role("link", name="Go to the start page").click()
    page.wait_for_url(f"{base}/")
    assert page.locator("h1").inner_text() == "Engram"
