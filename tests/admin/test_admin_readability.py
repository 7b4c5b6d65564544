"""The admin reads correctly: every model's plural name is a real plural, and text people or models
wrote cannot turn the rest of a line around (the review queues: test_admin_queues.py)."""

from __future__ import annotations

import re
from typing import Any

import html5lib  # type: ignore[import-untyped]
import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client
from django.utils import timezone
from django.utils.text import capfirst

from accounts.models import Actor
from history.models import EvidenceMethod, Message
from history.services import message_ingest
from memory.embeddings.index import vectors_stored
from memory.models import MemoryEntry, MemoryRevision
from memory.services import Belief, Provenance, memory_remember
from tests.admin.test_admin_pages import APPS, build_world, change_url, changelist_url

pytestmark = pytest.mark.django_db

#: Plurals Django's default ("add an s") gets wrong: doubled s, -xs, -shs, -chs, consonant-ys, and
#: "evidence", which has no plural.
WRONG_PLURAL = re.compile(r"(ss|xs|zs|shs|chs|[^aeiou]ys|evidences)$")


def test_every_model_is_listed_on_the_admin_index_under_a_correct_plural(admin_client: Client) -> None:
    """No admin label reads "Recall misss" or "Index outboxs": each model's plural is a real one, and the
    index lists it under that name."""
    index = admin_client.get("/admin/").content.decode()
    plurals = {
        model.__name__: str(model._meta.verbose_name_plural)
        for app in APPS
        for model in apps.get_app_config(app).get_models()
    }
    wrong = {name: plural for name, plural in plurals.items() if WRONG_PLURAL.search(plural)}
    assert wrong == {}
    for model in (m for app in APPS for m in apps.get_app_config(app).get_models()):
        # The vector tables exist only where the server has pgvector; elsewhere their pages are hidden.
        if admin.site.is_registered(model) and (vectors_stored() or not model.__name__.endswith("Embedding")):
            assert f">{capfirst(model._meta.verbose_name_plural)}</a>" in index, model.__name__
    assert plurals["RecallMiss"] == "recall misses"
    assert plurals["IndexOutbox"] == "index outbox entries"
    assert plurals["MessageSourceEvidence"] == "message source evidence"


RLO = "\u202e"
#: Elements inside which text's direction cannot leak out: ``<bdi>`` and anything with ``dir``.
ISOLATING = "bdi"


def unisolated_overrides(content: bytes) -> list[str]:
    """Every piece of the page's body text holding a RIGHT-TO-LEFT OVERRIDE outside an isolating element
    (``<bdi>``, an element with ``dir``) and outside an FSI … PDI pair."""
    body = html5lib.parse(content, namespaceHTMLElements=False).find("body")
    leaks: list[str] = []

    def unpaired(text: str | None) -> bool:
        return RLO in re.sub("\u2068[^\u2069]*\u2069", "", text or "")

    def walk(element: Any, isolated: bool) -> None:
        inside = isolated or element.tag == ISOLATING or "dir" in element.attrib
        if not inside and unpaired(element.text):
            leaks.append(f"<{element.tag}>{element.text}")
        for child in element:
            walk(child, inside)
            if not inside and unpaired(child.tail):
                leaks.append(f"after <{child.tag}>: {child.tail}")

    walk(body, False)
    return leaks


def test_a_right_to_left_override_in_text_people_wrote_reverses_nothing_else(admin_client: Client) -> None:
    """A statement, a message body and a display name holding U+202E sit in their own isolate on every
    admin list and page that shows them, so the ids, names and columns after them read as they are."""
    world = build_world("acme")
    world.alice.display_name = f"Alice{RLO} (id U999)"
    world.alice.save()
    spoof = message_ingest(
        conversation=world.conversation,
        actor=world.alice,
        body=f"Pay invoice {RLO}0001 today",
        created_at=timezone.now(),
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        external_id="m-rlo",
    ).message
    remembered = memory_remember(
        agent=world.agent,
        belief=Belief(body=f"Invoice {RLO}0001 is paid.", subject_id=world.alice.pk),
        provenance=Provenance(source_message_id=spoof.pk),
    )
    pages = {
        "memory list": changelist_url(MemoryEntry),
        "memory page": change_url(remembered.entry),
        "revision list": changelist_url(MemoryRevision),
        "revision page": change_url(remembered.revision),
        "message list": changelist_url(Message),
        "message page": change_url(spoof),
        "actor list": changelist_url(Actor),
        "actor page": change_url(world.alice),
    }
    for name, url in pages.items():
        content = admin_client.get(url).content
        assert RLO in content.decode(), name
        assert unisolated_overrides(content) == [], name
