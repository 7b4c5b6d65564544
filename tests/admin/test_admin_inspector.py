"""The operator's inspector: an entry's whole history on one page, amend through the amend service,
the review queues (flags, conflicts, sharing), readable traces, and "retrieve as this turn" through
the one retrieval service."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from accounts.models import Actor, OperatorScope
from config.errors import NotFound
from history.audience import Audience
from history.models import EvidenceMethod, Turn
from history.services import conversation_upsert, message_ingest
from memory.models import (
    EntryStatus,
    EvidenceKind,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    RecallMoment,
    RecallTrace,
    RevisionConflict,
    RevisionOrigin,
    SharingGrant,
    SharingRequest,
    SharingState,
)
from memory.retrieval.eligibility import perspective_for_turn
from memory.services import Belief, Provenance, conflict_resolve, entry_review_clear, memory_remember, revision_amend
from tests.admin.test_admin_pages import APPS, World, build_world, change_url
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> World:
    return build_world("acme")


def turn_of(world: World) -> Turn:
    turn = world.rows[Turn]
    assert isinstance(turn, Turn)
    return turn


def amend_url(entry: MemoryEntry) -> str:
    return reverse("admin:memory_memoryentry_amend", args=[entry.pk])


def amend_data(revision: MemoryRevision, **changes: Any) -> dict[str, Any]:
    data = {
        "expected_revision": revision.pk,
        "body": revision.body,
        "subject": revision.subject_id or "",
        "belief_type": revision.belief_type,
        "portability": revision.portability,
        "confidence": revision.confidence,
        "salience": revision.salience,
        "valid_from_0": revision.valid_from.strftime("%Y-%m-%d"),
        "valid_from_1": revision.valid_from.strftime("%H:%M:%S"),
        "valid_to_0": "",
        "valid_to_1": "",
    }
    if revision.always_on:
        data["always_on"] = "on"
    data.update(changes)
    return data


def scoped_operator(world: World, *, codenames: list[str] | None = None) -> tuple[Client, User]:
    user = User.objects.create_user(f"op-{world.tenant.slug}-{User.objects.count()}", is_staff=True)
    permissions = Permission.objects.filter(content_type__app_label__in=APPS)
    if codenames is not None:
        permissions = permissions.filter(codename__in=codenames)
    user.user_permissions.set(permissions)
    OperatorScope.objects.create(user=user, tenant=world.tenant)
    client = Client()
    client.force_login(user)
    return client, user


# --------------------------------------------------------------------------------------------------
# the entry page
# --------------------------------------------------------------------------------------------------


def test_entry_page_shows_history_evidence_sharing_ledger_and_traces(admin_client: Client, world: World):
    """Newest revision first, each with its evidence linking its source message; the grant with a
    revoke button, the pending request with approve/deny, the ledger and the trace that showed it."""
    entry = MemoryEntry.objects.get(pk=world.entry.pk)
    page = admin_client.get(change_url(entry)).content.decode()
    history = page[page.index('id="revision-history"') :]
    assert history.index("Prefers green tea over coffee.") < history.index("Prefers tea over coffee.")
    assert reverse("admin:history_message_change", args=[world.message.pk]) in history
    grant = SharingGrant.objects.get(revision__entry=entry)
    sharing = SharingRequest.objects.get(revision__entry=entry)
    assert reverse("admin:memory_sharinggrant_revoke", args=[grant.pk]) in page
    assert reverse("admin:memory_sharingrequest_decide", args=[sharing.pk]) in page
    assert 'value="approve"' in page and 'value="deny"' in page
    for operation in MemoryOperation.objects.filter(entry=entry):
        assert reverse("admin:memory_memoryoperation_change", args=[operation.pk]) in page
    trace = RecallTrace.objects.get(items__entry=entry)
    assert reverse("admin:memory_recalltrace_change", args=[trace.pk]) in page
    assert amend_url(entry) in page
    assert reverse("admin:memory_memoryentry_forget", args=[entry.pk]) in page


def test_view_only_operator_sees_no_write_buttons(world: World):
    client, _ = scoped_operator(world, codenames=["view_memoryentry", "view_sharinggrant", "view_sharingrequest"])
    page = client.get(change_url(world.entry)).content.decode()
    assert 'id="revision-history"' in page
    assert amend_url(world.entry) not in page
    assert "/forget/" not in page and "/revoke/" not in page and "/decide/" not in page
    assert client.get(amend_url(world.entry)).status_code == 403
    assert client.post(reverse("admin:memory_memoryentry_forget", args=[world.entry.pk])).status_code == 403


# --------------------------------------------------------------------------------------------------
# amend
# --------------------------------------------------------------------------------------------------


def test_amend_writes_a_new_revision_with_the_operator_as_provenance(world: World):
    """Saving the form writes revision N+1 through ``revision_amend``: the old revision stays, the
    new one is an operator edit whose evidence is the operator statement plus the previous revision."""
    client, operator = scoped_operator(world)
    entry = MemoryEntry.objects.select_related("current_revision").get(pk=world.entry.pk)
    previous = entry.current_revision
    assert previous is not None
    form = client.get(amend_url(entry))
    assert form.status_code == 200
    assert form.context["form"].initial["body"] == previous.body

    response = client.post(
        amend_url(entry), amend_data(previous, body="Prefers oolong over coffee.", confidence="0.95", always_on="on")
    )
    assert response.status_code == 302
    assert response["Location"] == change_url(entry)
    entry.refresh_from_db()
    revision = entry.current_revision
    assert revision is not None
    assert (revision.number, revision.body) == (previous.number + 1, "Prefers oolong over coffee.")
    assert (revision.confidence, revision.always_on) == (0.95, True)
    assert revision.valid_from == previous.valid_from  # untouched, to the microsecond
    assert revision.subject_id == previous.subject_id
    assert revision.created_by == RevisionOrigin.OPERATOR_EDIT
    assert revision.created_by_user_id == operator.pk
    assert revision.audience == previous.audience
    evidence = {(e.kind, e.operator_id, e.parent_revision_id) for e in MemoryEvidence.objects.filter(revision=revision)}
    assert evidence == {
        (EvidenceKind.INHERITED_REVISION, None, previous.pk),
        (EvidenceKind.OPERATOR, operator.pk, None),
    }
    assert MemoryRevision.objects.get(pk=previous.pk).body == previous.body
    assert MemoryOperation.objects.filter(entry=entry, kind="amend", revision=revision).count() == 1


def test_amend_with_a_stale_form_writes_nothing_and_says_so(admin_client: Client, world: World):
    """Someone amends between GET and POST: the POST is refused with an error message, and the form
    comes back with the operator's input, now expecting the revision that is current."""
    entry = world.entry
    entry.refresh_from_db()
    stale = entry.current_revision
    assert stale is not None
    newer = revision_amend(
        agent=world.agent,
        entry_id=entry.pk,
        expected_revision_id=stale.pk,
        provenance=Provenance(source_message_id=world.message.pk),
        body="Prefers mint tea.",
    ).revision
    response = admin_client.post(amend_url(entry), amend_data(stale, body="Prefers black coffee."))
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert any("nothing was written" in m for m in shown)
    assert response.context["conflict"] is True
    assert response.context["form"]["expected_revision"].value() == str(newer.pk)
    assert response.context["form"]["body"].value() == "Prefers black coffee."
    entry.refresh_from_db()
    assert entry.current_revision_id == newer.pk
    assert not MemoryRevision.objects.filter(entry=entry, body="Prefers black coffee.").exists()


def test_amend_that_changes_nothing_is_refused(admin_client: Client, world: World):
    world.entry.refresh_from_db()
    current = world.entry.current_revision
    assert current is not None
    response = admin_client.post(amend_url(world.entry), amend_data(current), follow=True)
    assert any("changes nothing" in str(m) for m in response.context["messages"])
    assert MemoryRevision.objects.filter(entry=world.entry).count() == 2


def test_amend_can_change_the_subject_to_a_person_of_this_agent_only(admin_client: Client, world: World):
    world.entry.refresh_from_db()
    current = world.entry.current_revision
    assert current is not None
    stranger = build_world("other").alice
    refused = admin_client.post(amend_url(world.entry), amend_data(current, subject=stranger.pk))
    assert refused.status_code == 200 and "subject" in refused.context["form"].errors
    bob = Actor.objects.get(connector=world.alice.connector, display_name="Bob")
    accepted = admin_client.post(amend_url(world.entry), amend_data(current, subject=bob.pk))
    assert accepted.status_code == 302
    world.entry.refresh_from_db()
    assert world.entry.current_revision is not None and world.entry.current_revision.subject_id == bob.pk


def test_forgotten_entries_and_other_tenants_cannot_be_amended(world: World):
    other = build_world("other")
    client, _ = scoped_operator(world)
    assert client.get(amend_url(other.entry)).status_code == 302  # another tenant's entry looks missing
    assert client.post(reverse("admin:memory_memoryentry_forget", args=[other.entry.pk])).status_code == 302
    other.entry.refresh_from_db()
    assert other.entry.status == EntryStatus.LIVE
    response = client.post(reverse("admin:memory_memoryentry_forget", args=[world.entry.pk]))
    assert response.status_code == 302
    world.entry.refresh_from_db()
    assert world.entry.status == EntryStatus.FORGOTTEN
    again = client.get(amend_url(world.entry), follow=True)
    assert any("cannot be amended" in str(m) for m in again.context["messages"])


def test_write_buttons_answer_post_only(admin_client: Client, world: World):
    for name in ("forget", "clear_flag"):
        assert admin_client.get(reverse(f"admin:memory_memoryentry_{name}", args=[world.entry.pk])).status_code == 405
    world.entry.refresh_from_db()
    assert world.entry.status == EntryStatus.LIVE


# --------------------------------------------------------------------------------------------------
# queues: flags, conflicts, sharing
# --------------------------------------------------------------------------------------------------


def test_entry_review_clear_service(world: World):
    """Clearing takes a flagged entry off the queue once; another agent's entry looks missing."""
    MemoryEntry.objects.filter(pk=world.entry.pk).update(flagged_for_review=True)
    assert entry_review_clear(agent=world.agent, entry_id=world.entry.pk).changed
    assert not entry_review_clear(agent=world.agent, entry_id=world.entry.pk).changed
    assert not MemoryEntry.objects.get(pk=world.entry.pk).flagged_for_review
    with pytest.raises(NotFound):
        entry_review_clear(agent=AgentFactory.create(), entry_id=world.entry.pk)


def test_flag_queue_lists_flagged_entries_and_clears_them(admin_client: Client, world: World):
    MemoryEntry.objects.filter(pk=world.entry.pk).update(flagged_for_review=True)
    queue = admin_client.get(reverse("admin:index")).content.decode()
    assert "flagged_for_review__exact=1" in queue
    listed = admin_client.get(
        reverse("admin:memory_memoryentry_changelist"), {"flagged_for_review__exact": "1", "status__exact": "live"}
    )
    assert [e.pk for e in listed.context["cl"].result_list] == [world.entry.pk]
    page = admin_client.get(change_url(world.entry)).content.decode()
    clear = reverse("admin:memory_memoryentry_clear_flag", args=[world.entry.pk])
    assert clear in page
    assert admin_client.post(clear).status_code == 302
    assert not MemoryEntry.objects.get(pk=world.entry.pk).flagged_for_review
    MemoryEntry.objects.filter(pk=world.entry.pk).update(flagged_for_review=True)
    admin_client.post(
        reverse("admin:memory_memoryentry_changelist"),
        {"action": "clear_review_flags", "_selected_action": [world.entry.pk]},
    )
    assert not MemoryEntry.objects.get(pk=world.entry.pk).flagged_for_review


def test_conflict_resolve_service(world: World):
    conflict = world.rows[RevisionConflict]
    assert isinstance(conflict, RevisionConflict)
    first = conflict_resolve(agent=world.agent, conflict_id=conflict.pk)
    assert first.changed and first.conflict.resolved_at is not None
    second = conflict_resolve(agent=world.agent, conflict_id=conflict.pk)
    assert not second.changed and second.conflict.resolved_at == first.conflict.resolved_at
    with pytest.raises(NotFound):
        conflict_resolve(agent=AgentFactory.create(), conflict_id=conflict.pk)


def test_conflict_page_shows_both_revisions_and_resolves(admin_client: Client, world: World):
    conflict = world.rows[RevisionConflict]
    assert isinstance(conflict, RevisionConflict)
    queue = admin_client.get(reverse("admin:memory_revisionconflict_changelist"), {"resolved_at__isempty": "1"})
    assert [c.pk for c in queue.context["cl"].result_list] == [conflict.pk]
    page = admin_client.get(change_url(conflict)).content.decode()
    pair = page[page.index('id="conflict-pair"') :]
    assert "Prefers green tea over coffee." in pair and "The team ships on Thursdays." in pair
    assert admin_client.post(reverse("admin:memory_revisionconflict_resolve", args=[conflict.pk])).status_code == 302
    conflict.refresh_from_db()
    assert conflict.resolved_at is not None
    assert (
        not admin_client.get(reverse("admin:memory_revisionconflict_changelist"), {"resolved_at__isempty": "1"})
        .context["cl"]
        .result_list
    )


def test_resolve_action(admin_client: Client, world: World):
    conflict = world.rows[RevisionConflict]
    admin_client.post(
        reverse("admin:memory_revisionconflict_changelist"),
        {"action": "resolve_conflicts", "_selected_action": [conflict.pk]},
    )
    assert RevisionConflict.objects.get(pk=conflict.pk).resolved_at is not None


def test_sharing_buttons_on_the_entry_page_go_through_the_services(world: World):
    """Deny from the entry page decides the request; revoke ends the grant; both come back to the entry."""
    client, operator = scoped_operator(world)
    sharing = SharingRequest.objects.get(revision__entry=world.entry)
    grant = SharingGrant.objects.get(revision__entry=world.entry)
    here = change_url(world.entry)
    response = client.post(
        reverse("admin:memory_sharingrequest_decide", args=[sharing.pk]), {"decision": "deny", "next": here}
    )
    assert response.status_code == 302 and response["Location"] == here
    sharing.refresh_from_db()
    assert (sharing.state, sharing.decided_by_user_id) == (SharingState.DENIED, operator.pk)
    response = client.post(reverse("admin:memory_sharinggrant_revoke", args=[grant.pk]), {"next": "https://evil.test/"})
    assert response["Location"] == change_url(grant)  # a foreign next is ignored
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    again = client.post(reverse("admin:memory_sharingrequest_decide", args=[sharing.pk]), {"decision": "approve"})
    assert again.status_code == 302
    sharing.refresh_from_db()
    assert sharing.state == SharingState.DENIED  # already decided: an error message, nothing written


def test_pending_request_page_offers_approve(admin_client: Client, world: World):
    sharing = SharingRequest.objects.get(revision__entry=world.entry)
    page = admin_client.get(change_url(sharing)).content.decode()
    assert reverse("admin:memory_sharingrequest_decide", args=[sharing.pk]) in page
    pending = admin_client.get(reverse("admin:memory_sharingrequest_changelist"), {"state__exact": "pending"})
    assert [r.pk for r in pending.context["cl"].result_list] == [sharing.pk]


# --------------------------------------------------------------------------------------------------
# traces and previews
# --------------------------------------------------------------------------------------------------


def test_trace_page_shows_the_rendered_block_and_items_in_order(admin_client: Client, world: World):
    turn = turn_of(world)
    preview = admin_client.get(reverse("admin:history_turn_preview", args=[turn.pk])).context["preview"]
    trace = RecallTrace.objects.get(pk=preview.result.trace_id)
    response = admin_client.get(change_url(trace))
    page = response.content.decode()
    assert '<pre class="engram-rendered">' in page
    assert escape(trace.rendered_text) in page
    formset = response.context["inline_admin_formsets"][0].formset
    positions = [form.instance.position for form in formset.forms]
    assert positions == sorted(positions) and positions


def test_turn_preview_calls_the_one_retrieval_service(admin_client: Client, world: World, monkeypatch):
    """The preview is ``recall`` with the turn's perspective, the query formed from its inbound
    message, and the preview moment; its trace belongs to no session or turn."""
    import memory.previews as previews

    calls: list[dict[str, Any]] = []
    real_recall = previews.recall

    def spy(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_recall(**kwargs)

    monkeypatch.setattr(previews, "recall", spy)
    turn = turn_of(world)
    turn_page = admin_client.get(change_url(turn)).content.decode()
    url = reverse("admin:history_turn_preview", args=[turn.pk])
    assert url in turn_page
    response = admin_client.get(url)
    assert response.status_code == 200
    [call] = calls
    assert call["perspective"] == perspective_for_turn(Turn.objects.get(pk=turn.pk))
    assert call["moment"] == RecallMoment.PREVIEW
    assert call["query"].text == world.message.body
    preview = response.context["preview"]
    # The world links the tea preference in an unresolved conflict with the shipping day: the partner
    # comes beside it.
    assert [i.statement for i in preview.result.items] == [
        "Prefers green tea over coffee.",
        "The team ships on Thursdays.",
    ]
    page = response.content.decode()
    assert escape(preview.result.rendered) in page
    assert f"{preview.result.items[0].score:.3f}" in page and preview.result.items[0].reason in page
    trace = RecallTrace.objects.get(pk=preview.result.trace_id)
    assert (trace.moment, trace.turn_id, trace.session_id) == (RecallMoment.PREVIEW, None, None)


def test_conversation_preview_respects_the_requesters_audience(admin_client: Client, world: World):
    """A memory stated in Bob's DM never shows in a preview of the team conversation."""
    bob = Actor.objects.get(connector=world.alice.connector, display_name="Bob")
    dm = conversation_upsert(
        agent=world.agent,
        connector=world.alice.connector,
        external_thread_id="D-bob",
        audience=Audience.members(world.alice.connector.namespace, [bob.pk]),
    )
    secret = message_ingest(
        conversation=dm,
        actor=bob,
        body="Bob drinks green tea secretly",
        created_at=world.message.created_at,
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        external_id="dm1",
    ).message
    memory_remember(
        agent=world.agent,
        belief=Belief(body="Bob drinks green tea in secret.", subject_id=bob.pk),
        provenance=Provenance(source_message_id=secret.pk),
    )
    url = reverse("admin:history_conversation_preview", args=[world.conversation.pk])
    form = admin_client.get(url).context["form"]
    assert set(form.fields["requester"].queryset) == {world.alice, bob}
    response = admin_client.get(url, {"run": "1", "requester": str(bob.pk), "message": "who drinks green tea"})
    statements = [i.statement for i in response.context["preview"].result.items]
    assert "Prefers green tea over coffee." in statements
    assert "Bob drinks green tea in secret." not in statements
    in_dm = admin_client.get(
        reverse("admin:history_conversation_preview", args=[dm.pk]),
        {"run": "1", "requester": str(bob.pk), "message": "who drinks green tea"},
    )
    assert "Bob drinks green tea in secret." in [i.statement for i in in_dm.context["preview"].result.items]


def test_preview_needs_memory_and_trace_view_permissions(world: World):
    client, _ = scoped_operator(world, codenames=["view_turn", "view_conversation"])
    turn = turn_of(world)
    assert client.get(reverse("admin:history_turn_preview", args=[turn.pk])).status_code == 403
    assert "/preview/" not in client.get(change_url(turn)).content.decode()
    memory_only, _ = scoped_operator(world, codenames=["view_memoryentry", "view_recalltrace"])
    assert memory_only.get(reverse("admin:history_turn_preview", args=[turn.pk])).status_code == 403
    other = build_world("other")
    client, _ = scoped_operator(world)
    assert client.get(reverse("admin:history_turn_preview", args=[turn_of(other).pk])).status_code == 302
    assert not RecallTrace.objects.filter(moment=RecallMoment.PREVIEW).exists()
