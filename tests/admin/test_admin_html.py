"""Every admin page the inspector renders is valid HTML (html5lib, strict): each model's changelist and
change page, the amend form, the conflict pair, the previews and the index with its review queues.

No exclusions were needed: Django 5.2's admin markup parses cleanly."""

from __future__ import annotations

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from memory.models import MemoryEntry, RevisionConflict
from tests.admin.conftest import assert_valid_html
from tests.admin.test_admin_pages import (  # the autouse fixture skips embedding pages without pgvector
    ALL_MODELS,
    World,
    _embedding_pages_need_pgvector,  # noqa: F401
    build_world,
    change_url,
    changelist_url,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> World:
    return build_world("acme")


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_changelist_and_change_page_are_valid_html(admin_client: Client, world: World, model: type[Model]):
    for url in (changelist_url(model), change_url(world.rows[model])):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert_valid_html(response.content, url)


def test_filtered_searched_changelists_are_valid_html(admin_client: Client, world: World):
    for url, params in (
        (changelist_url(MemoryEntry), {"q": "tea", "flagged_for_review__exact": "1"}),
        (changelist_url(RevisionConflict), {"resolved_at__isempty": "1"}),
    ):
        response = admin_client.get(url, params)
        assert response.status_code == 200
        assert_valid_html(response.content, url)


def test_custom_views_are_valid_html(admin_client: Client, world: World):
    turn = world.rows[next(m for m in world.rows if m._meta.model_name == "turn")]
    urls = [
        reverse("admin:index"),
        reverse("admin:memory_memoryentry_amend", args=[world.entry.pk]),
        reverse("admin:history_turn_preview", args=[turn.pk]),
        reverse("admin:history_conversation_preview", args=[world.conversation.pk]),
        reverse("admin:history_conversation_preview", args=[world.conversation.pk])
        + f"?run=1&requester={world.alice.pk}&message=what+does+Alice+drink",
    ]
    for url in urls:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert_valid_html(response.content, url)


def test_amend_form_with_errors_is_valid_html(admin_client: Client, world: World):
    url = reverse("admin:memory_memoryentry_amend", args=[world.entry.pk])
    response = admin_client.post(url, {"body": "", "confidence": "7"})
    assert response.status_code == 200
    assert response.context["form"].errors
    assert_valid_html(response.content, url)
