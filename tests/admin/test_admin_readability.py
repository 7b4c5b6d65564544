"""The admin reads correctly: every model's plural name is a real plural, the review queues say how many
rows wait in them, and text people or models wrote cannot turn the rest of a line around."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.test import Client
from django.utils.text import capfirst

from tests.admin.test_admin_pages import APPS

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
    for plural in plurals.values():
        assert f">{capfirst(plural)}</a>" in index, plural
    assert plurals["RecallMiss"] == "recall misses"
    assert plurals["IndexOutbox"] == "index outbox entries"
    assert plurals["MessageSourceEvidence"] == "message source evidence"
