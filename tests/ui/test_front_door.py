"""The front door and the error pages, through Django's test client: ``/`` sends a signed-in user to
their turns and shows anyone else the landing page; 403, 404 and 500 are the site's own pages (valid
HTML, in its style); the API keeps answering those errors in its JSON error shape.

This module is also the URLconf for the tests that need a view that refuses or fails: the project's
routes plus three such views, with the project's error handlers."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.test import Client, override_settings
from django.urls import path

import config.urls
from tests.ui.conftest import assert_valid_html


def _refuses(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("not for you")


def _fails(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [
    path("refuses/", _refuses),
    path("fails/", _fails),
    path("api/v1/fails", _fails),
    *config.urls.urlpatterns,
]
handler400 = config.urls.handler400
handler403 = config.urls.handler403
handler404 = config.urls.handler404
handler500 = config.urls.handler500

with_failing_views = override_settings(ROOT_URLCONF=__name__, DEBUG=False)

LANDING_LINKS = {"/login/", "/admin/", "/api/docs/", "/api/"}


def links(html: str) -> set[str]:
    return set(re.findall(r'<a [^>]*href="([^"]+)"', html))


@pytest.mark.django_db
def test_a_visitor_gets_the_landing_page_with_its_links(client: Client) -> None:
    """Signed out, ``/`` is a page saying what Engram is, linking to sign-in, admin, API docs and API root."""
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert_valid_html(html)
    assert "Engram is the memory of an AI agent" in html
    assert links(html) >= LANDING_LINKS
    assert client.head("/").status_code == 200
    assert client.post("/").status_code == 405  # the front door reads; it takes nothing


@pytest.mark.django_db
def test_a_signed_in_user_is_sent_to_their_turns(client: Client) -> None:
    """Signed in, ``/`` redirects to the turns list (url ``engram-turns``)."""
    client.force_login(User.objects.create_user("frontdoor", password="pw-frontdoor-1"))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/turns/"
    assert client.get("/", follow=True).redirect_chain == [("/turns/", 302)]


@pytest.mark.django_db
def test_the_admins_view_site_link_lands_on_the_front_door(client: Client) -> None:
    """The admin's "View site" points at ``/``, which now answers."""
    client.force_login(User.objects.create_superuser("operator", password="pw-operator-1"))
    html = client.get("/admin/").content.decode()
    assert '<a href="/">View site</a>' in html
    client.logout()
    assert client.get("/").status_code == 200


@pytest.mark.django_db
def test_an_unknown_page_is_the_sites_404(client: Client) -> None:
    """An address no route matches answers 404 with the site's page, valid HTML, linking back to ``/``."""
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert_valid_html(html)
    assert "<h1>Not found</h1>" in html
    assert 'href="/static/engram/engram.css"' in html  # the site's style, not Django's bare page
    assert "/" in links(html)


@pytest.mark.django_db
def test_an_api_404_stays_json(client: Client) -> None:
    """Under /api/ an unmatched address answers the API's error shape, not the HTML page."""
    for url in ("/api/v1/no-such-thing", "/api/v1/turns/-1"):
        response = client.get(url)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"code": "not_found", "message": "not found", "detail": {}}


@pytest.mark.django_db
@with_failing_views
def test_a_refusal_is_the_sites_403(client: Client) -> None:
    """A ``PermissionDenied`` on a page answers 403 with the site's page, valid HTML."""
    response = client.get("/refuses/")
    assert response.status_code == 403
    html = response.content.decode()
    assert_valid_html(html)
    assert "<h1>Not allowed</h1>" in html
    assert "not for you" not in html  # the exception's text is for the log, not the visitor


@pytest.mark.django_db
@with_failing_views
def test_a_failure_is_the_sites_500_and_an_api_failure_stays_json() -> None:
    """An unhandled exception answers 500: the site's page on a page, the API's error shape under /api/."""
    client = Client(raise_request_exception=False)
    response = client.get("/fails/")
    assert response.status_code == 500
    html = response.content.decode()
    assert_valid_html(html)
    assert "<h1>Something went wrong</h1>" in html
    assert "a bug" not in html

    api: Any = client.get("/api/v1/fails")
    assert api.status_code == 500
    assert api["Content-Type"] == "application/json"
    assert api.json()["code"] == "server_error"


def test_the_500_page_needs_no_request_and_no_database() -> None:
    """Django renders 500.html with a bare context; it must render so (this test may not touch the
    database: pytest-django fails it if it does)."""
    html = loader.get_template("500.html").render()
    assert_valid_html(html)
    assert "<h1>Something went wrong</h1>" in html
