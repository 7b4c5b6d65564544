"""The review queues on the admin index say how many rows wait in each, counted in the operator's own
tenants, and list only the queues the operator may view."""

from __future__ import annotations

import html5lib  # type: ignore[import-untyped]
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from accounts.models import OperatorScope
from memory.models import MemoryEntry, RevisionConflict
from tests.admin.test_admin_pages import APPS, build_world

pytestmark = pytest.mark.django_db


def queue_counts(client: Client) -> dict[str, int]:
    """The review queues on the admin index: each row's link text and the count beside it."""
    index = html5lib.parse(client.get("/admin/").content, namespaceHTMLElements=False)
    rows = index.findall(".//div[@id='review-queues']//tr")
    return {row.find("th/a").text: int(row.find("td/span").text) for row in rows}


def test_the_review_queues_show_how_many_rows_wait_in_each_of_the_operators_tenants(client: Client) -> None:
    """Flagged memories, unresolved conflicts and pending sharing requests, each counted in the rows the
    operator may see: another tenant's queue adds nothing to theirs."""
    mine, theirs = build_world("tenant-a"), build_world("tenant-b")
    MemoryEntry.objects.filter(pk__in=[mine.entry.pk, theirs.entry.pk]).update(flagged_for_review=True)
    RevisionConflict.objects.filter(agent=theirs.agent).update(resolved_at=timezone.now())
    user = User.objects.create_user("operator-a", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    OperatorScope.objects.create(user=user, tenant=mine.tenant)
    client.force_login(user)
    assert queue_counts(client) == {
        "Flagged memories": 1,
        "Unresolved conflicts": 1,
        "Pending sharing requests": 1,
    }
    root = User.objects.create_superuser("root")
    client.force_login(root)
    assert queue_counts(client) == {
        "Flagged memories": 2,
        "Unresolved conflicts": 1,
        "Pending sharing requests": 2,
    }


def test_an_operator_sees_only_the_queues_they_may_view(client: Client) -> None:
    world = build_world("acme")
    user = User.objects.create_user("reviewer", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename="view_sharingrequest"))
    OperatorScope.objects.create(user=user, tenant=world.tenant)
    client.force_login(user)
    assert queue_counts(client) == {"Pending sharing requests": 1}
