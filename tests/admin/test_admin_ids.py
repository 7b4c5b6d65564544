"""One id everywhere: the admin names a memory by its ``m:`` id, as recall, citations and the API do,
and its search finds a memory by any id a person pastes: ``m:0000002b`` or ``0000002b`` (any revision
of it, an old citation's included) or the entry id as a plain number; other text is full-text search."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Model
from django.test import Client

from accounts.models import OperatorScope
from memory.models import MemoryEntry, MemoryRevision
from memory.services import Provenance, revision_amend
from tests.admin.test_admin_pages import APPS, World, build_world, change_url, changelist_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> World:
    """Entry ``world.entry`` has revisions 1 ("Prefers tea…") and 2 (current, "…green tea…"); the
    world's other entry has one revision."""
    return build_world("acme")


def revisions_of(entry: MemoryEntry) -> list[MemoryRevision]:
    return list(MemoryRevision.objects.filter(entry=entry).order_by("number"))


def found(client: Client, model: type[Model], term: str) -> list[int]:
    response = client.get(changelist_url(model), {"q": term})
    assert response.status_code == 200
    return sorted(row.pk for row in response.context["cl"].result_list)


def test_the_memory_list_and_page_name_each_memory_by_its_current_m_id(admin_client: Client, world: World) -> None:
    """The list shows each memory's current ``m:`` id with its entry id; the memory's page shows it too,
    and each revision in its history shows its own."""
    old, current = revisions_of(world.entry)
    listing = admin_client.get(changelist_url(MemoryEntry)).content.decode()
    assert f'{current.short_id}<br><span class="engram-muted">entry {world.entry.pk}</span>' in listing
    page = admin_client.get(change_url(world.entry)).content.decode()
    assert f"<h2>{current.short_id} (live)</h2>" in page
    assert f"{current.short_id}<br>" in page  # the "memory" field
    history = page[page.index('id="revision-history"') :]
    assert history.index(current.short_id) < history.index(old.short_id)
    assert f"m:{world.entry.pk} " not in page  # never the entry id dressed as an m: id


def test_the_revision_list_and_page_show_m_ids(admin_client: Client, world: World) -> None:
    old, current = revisions_of(world.entry)
    listing = admin_client.get(changelist_url(MemoryRevision)).content.decode()
    for revision in (old, current):
        assert f'<th class="field-revision"><a href="{change_url(revision)}">{revision.short_id}</a></th>' in listing
    page = admin_client.get(change_url(old)).content.decode()
    assert f'<div class="readonly">{old.short_id}</div>' in page


def test_the_memory_search_reads_m_ids_bare_hex_and_entry_ids_unambiguously(admin_client: Client, world: World) -> None:
    """``m:`` + hex and exactly 8 hex digits name a revision (old ones too); a plain decimal is an entry
    id; so ``000000NN`` never opens entry NN. Words are still full-text search."""
    old, current = revisions_of(world.entry)
    other = MemoryEntry.objects.exclude(pk=world.entry.pk).get(agent=world.agent)
    assert found(admin_client, MemoryEntry, old.short_id) == [world.entry.pk]
    assert found(admin_client, MemoryEntry, f"[{current.short_id}]") == [world.entry.pk]
    assert found(admin_client, MemoryEntry, f"{old.pk:08x}") == [world.entry.pk]
    assert found(admin_client, MemoryEntry, str(other.pk)) == [other.pk]
    padded = f"{other.pk:08d}"  # looks like entry ``other`` zero-padded: it is revision 0x…, not that entry
    owners = sorted(MemoryEntry.objects.filter(revisions__pk=int(padded, 16)).values_list("pk", flat=True))
    assert int(padded, 16) not in {r.pk for r in revisions_of(other)}
    assert found(admin_client, MemoryEntry, padded) == owners
    assert other.pk not in owners
    assert found(admin_client, MemoryEntry, "m:7fffffffffffffff") == []
    assert found(admin_client, MemoryEntry, "green tea") == [world.entry.pk]


def test_the_revision_search_reads_the_same_rule(admin_client: Client, world: World) -> None:
    """In the revision list an ``m:`` id finds that revision; an entry id finds all its revisions."""
    old, current = revisions_of(world.entry)
    assert found(admin_client, MemoryRevision, old.short_id) == [old.pk]
    assert found(admin_client, MemoryRevision, f"{current.pk:08x}") == [current.pk]
    assert found(admin_client, MemoryRevision, str(world.entry.pk)) == [old.pk, current.pk]
    assert found(admin_client, MemoryRevision, "Thursdays") == [
        r.pk for r in MemoryRevision.objects.filter(body__contains="Thursdays")
    ]


def test_an_operator_cannot_find_another_tenants_memory_by_its_m_id(client: Client) -> None:
    """The search narrows the operator's own rows: another tenant's ``m:`` id or entry id finds nothing."""
    mine, theirs = build_world("tenant-a"), build_world("tenant-b")
    user = User.objects.create_user("operator-a", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    OperatorScope.objects.create(user=user, tenant=mine.tenant)
    client.force_login(user)
    their_revision = revisions_of(theirs.entry)[0]
    assert found(client, MemoryEntry, their_revision.short_id) == []
    assert found(client, MemoryEntry, str(theirs.entry.pk)) == []
    assert found(client, MemoryRevision, their_revision.short_id) == []
    assert found(client, MemoryEntry, revisions_of(mine.entry)[0].short_id) == [mine.entry.pk]


def test_the_admin_messages_name_the_memory_by_its_m_id(admin_client: Client, world: World) -> None:
    """Amending from the admin names the memory by its new current ``m:`` id."""
    current = revisions_of(world.entry)[-1]
    amended = revision_amend(
        agent=world.agent,
        entry_id=world.entry.pk,
        expected_revision_id=current.pk,
        provenance=Provenance(source_message_id=world.message.pk),
        body="Prefers green tea, no sugar.",
    )
    response = admin_client.post(
        changelist_url(MemoryEntry), {"action": "forget_entries", "_selected_action": [world.entry.pk]}, follow=True
    )
    assert response.status_code == 200
    response = admin_client.post(change_url(world.entry).replace("/change/", "/forget/"), follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert shown == [f"{amended.revision.short_id} was already forgotten."]
