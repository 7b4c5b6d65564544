"""The operator admin: every model browsable, immutable rows read-only, operators confined to their
tenants, and the admin actions going through the write services."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import Model
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.models import Actor, ApiKey, Connector, IdentityLink, OperatorScope, RuntimeAgent, Tenant, UserActor
from accounts.services import api_key_create, api_key_digest
from history.audience import Audience
from history.models import (
    Conversation,
    ConversationSearchEvent,
    EvidenceMethod,
    Message,
    MessageSearchDocument,
    MessageSourceEvidence,
    Session,
    Turn,
)
from history.services import conversation_upsert, message_ingest
from memory.embeddings.index import vectors_stored
from memory.models import (
    BeliefType,
    DeletedRevision,
    EmbeddingGeneration,
    EntryStatus,
    ErasureEvent,
    IndexOutbox,
    ManagementEndpoint,
    ManagementReadEvent,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    MessageEmbedding,
    RecallMiss,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    RevisionConflict,
    RevisionEmbedding,
    RevisionSearchDocument,
    SharingConsent,
    SharingGrant,
    SharingRequest,
)
from memory.services import Belief, Provenance, memory_remember, revision_amend

pytestmark = pytest.mark.django_db

APPS = ("accounts", "history", "memory")
IMMUTABLE = [
    MemoryRevision,
    MemoryEvidence,
    Message,
    MessageSourceEvidence,
    MessageSearchDocument,
    RevisionSearchDocument,
    RetrievalEvent,
    ConversationSearchEvent,
    MemoryOperation,
    Rejection,
    RecallTraceItem,
    RevisionEmbedding,
    MessageEmbedding,
    ErasureEvent,
    ManagementReadEvent,
]
#: Installation-wide rows with no tenant: superusers only.
GLOBAL = [EmbeddingGeneration, IndexOutbox]
ALL_MODELS = [m for app in APPS for m in apps.get_app_config(app).get_models()]
EMBEDDING_MODELS: set[type[Model]] = {RevisionEmbedding, MessageEmbedding}


@dataclass
class World:
    tenant: Tenant
    agent: RuntimeAgent
    alice: Actor
    conversation: Conversation
    message: Message
    entry: MemoryEntry
    rows: dict[type[Model], Model]


def build_world(slug: str) -> World:
    """One tenant with at least one row of every model of the three apps."""
    now = timezone.now()
    tenant = Tenant.objects.create(name=slug.title(), slug=slug)
    agent = RuntimeAgent.objects.create(tenant=tenant, name=f"{slug}-agent")
    api_key = api_key_create(agent=agent, label="ci").api_key
    connector = Connector.objects.create(agent=agent, type="slack", name=slug)
    alice = Actor.objects.create(tenant=tenant, connector=connector, external_id=f"{slug}-U1", display_name="Alice")
    bob = Actor.objects.create(tenant=tenant, connector=connector, external_id=f"{slug}-U2", display_name="Bob")
    link = IdentityLink.objects.create(agent=agent, actor_a=alice, actor_b=bob, proof="signed in", verified_at=now)
    end_user = User.objects.create_user(f"{slug}-alice")
    user_actor = UserActor.objects.create(user=end_user, actor=alice)
    scope = OperatorScope.objects.create(user=User.objects.create_user(f"{slug}-operator"), tenant=tenant)
    team = Audience.members(connector.namespace, [alice.pk, bob.pk])
    conversation = conversation_upsert(
        agent=agent, connector=connector, external_thread_id="C1", audience=team, title=f"#{slug}-team"
    )
    message = message_ingest(
        conversation=conversation,
        actor=alice,
        body="Alice prefers green tea over coffee",
        created_at=now,
        evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        external_id="m1",
    ).message
    session = Session.objects.create(agent=agent, conversation=conversation)
    turn = Turn.objects.create(
        agent=agent,
        session=session,
        inbound_message=message,
        requester=alice,
        audience_kind=team.kind,
        audience_namespace=team.namespace,
        audience_readers=list(team.readers),
    )
    search_event = ConversationSearchEvent.objects.create(agent=agent, turn=turn, destination_audience=team.as_dict())
    first = memory_remember(
        agent=agent,
        belief=Belief(body="Prefers tea over coffee.", belief_type=BeliefType.PREFERENCE, subject_id=alice.pk),
        provenance=Provenance(source_message_id=message.pk),
    )
    amended = revision_amend(
        agent=agent,
        entry_id=first.entry.pk,
        expected_revision_id=first.revision.pk,
        provenance=Provenance(source_message_id=message.pk),
        body="Prefers green tea over coffee.",
    )
    other = memory_remember(
        agent=agent,
        belief=Belief(body="The team ships on Thursdays."),
        provenance=Provenance(source_message_id=message.pk),
    )
    conflict = RevisionConflict.objects.create(agent=agent, revision_a=amended.revision, revision_b=other.revision)
    sharing = SharingRequest.objects.create(
        agent=agent,
        revision=amended.revision,
        conversation=conversation,
        confirmer=alice,
        audience_kind="workspace",
        audience_namespace=connector.namespace,
    )
    consent = SharingConsent.objects.create(agent=agent, request=sharing, actor=alice, role="source")
    grant = SharingGrant.objects.create(
        agent=agent,
        revision=amended.revision,
        request=sharing,
        conversation=conversation,
        granted_by_actor=alice,
        audience_kind="workspace",
        audience_namespace=connector.namespace,
    )
    generation = EmbeddingGeneration.objects.create(model_name=f"{slug}-model", dims=4)
    embeddings: dict[type[Model], Model] = {}
    if vectors_stored():  # the tables exist only where the server has pgvector
        embeddings[RevisionEmbedding] = RevisionEmbedding.objects.create(
            revision=amended.revision,
            agent_id=agent.pk,
            generation=generation,
            model_name="m",
            dims=4,
            vector=[0.1] * 4,
        )
        embeddings[MessageEmbedding] = MessageEmbedding.objects.create(
            message=message, agent_id=agent.pk, generation=generation, model_name="m", dims=4, vector=[0.2] * 4
        )
    trace = RecallTrace.objects.create(
        agent=agent,
        session=session,
        turn=turn,
        moment="in_turn",
        profile="task",
        policy_version="test",
        as_of=now,
        rendered_text="- Prefers green tea over coffee.",
        rendered_sha256="0" * 64,
        audience_kind=team.kind,
        audience_namespace=team.namespace,
        audience_readers=list(team.readers),
    )
    item = RecallTraceItem.objects.create(
        trace=trace, position=1, entry=first.entry, revision=amended.revision, band="high", score=0.9, reason="subject"
    )
    event = RetrievalEvent.objects.create(
        agent=agent, trace=trace, destination_audience=team.as_dict(), selected_revision_ids=[amended.revision.pk]
    )
    rejection = Rejection.objects.create(
        agent=agent, user=end_user, trace_item=item, revision=amended.revision, kind="wrong", fingerprint="f" * 64
    )
    miss = RecallMiss.objects.create(agent=agent, subject=bob, count=3, last_missed_at=now)
    tombstone = DeletedRevision.objects.create(revision_id=amended.revision.pk + 1000, agent=agent, deleted_at=now)
    erasure = ErasureEvent.objects.create(tenant=tenant, kind="person", actor_id=bob.pk, requested_by="admin:root")
    management_read = ManagementReadEvent.objects.create(
        agent=agent, api_key=api_key, endpoint=ManagementEndpoint.MEMORIES_RETRIEVE, entry_ids=[first.entry.pk]
    )
    rows: dict[type[Model], Model] = {
        Tenant: tenant,
        RuntimeAgent: agent,
        ApiKey: api_key,
        Connector: connector,
        Actor: alice,
        IdentityLink: link,
        UserActor: user_actor,
        OperatorScope: scope,
        Conversation: conversation,
        Message: message,
        MessageSourceEvidence: MessageSourceEvidence.objects.get(message=message),
        MessageSearchDocument: MessageSearchDocument.objects.get(message=message),
        Session: session,
        Turn: turn,
        ConversationSearchEvent: search_event,
        MemoryEntry: first.entry,
        MemoryRevision: amended.revision,
        RevisionSearchDocument: RevisionSearchDocument.objects.get(revision=amended.revision),
        MemoryEvidence: MemoryEvidence.objects.filter(revision=amended.revision).earliest("pk"),
        RevisionConflict: conflict,
        SharingRequest: sharing,
        SharingConsent: consent,
        SharingGrant: grant,
        EmbeddingGeneration: generation,
        **embeddings,
        IndexOutbox: IndexOutbox.objects.get(target="message", target_id=message.pk),
        RecallTrace: trace,
        RecallTraceItem: item,
        RetrievalEvent: event,
        MemoryOperation: amended.operation,
        Rejection: rejection,
        RecallMiss: miss,
        DeletedRevision: tombstone,
        ErasureEvent: erasure,
        ManagementReadEvent: management_read,
    }
    return World(
        tenant=tenant,
        agent=agent,
        alice=alice,
        conversation=conversation,
        message=message,
        entry=first.entry,
        rows=rows,
    )


def changelist_url(model: type[Model]) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change_url(obj: Model) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[quote(obj.pk)])


@pytest.fixture
def world() -> World:
    return build_world("acme")


def test_every_model_is_registered():
    """An operator can browse every model of the three apps from the admin."""
    registered = {m for m in admin.site._registry if m._meta.app_label in APPS}
    assert registered == set(ALL_MODELS)


@pytest.fixture(autouse=True)
def _embedding_pages_need_pgvector(request: pytest.FixtureRequest) -> None:
    """The embedding models' tables exist only where the server has pgvector (memory/0003)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("model") in EMBEDDING_MODELS:
        request.getfixturevalue("db")
        if not vectors_stored():
            pytest.skip("the server has no pgvector: no embedding tables to show")


def test_world_covers_every_model(world: World):
    assert set(world.rows) == set(ALL_MODELS) - (set() if vectors_stored() else EMBEDDING_MODELS)
    assert all(row is not None for row in world.rows.values())


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_changelist_and_change_page_render(admin_client: Client, world: World, model: type[Model]):
    """Each changelist and a change page answer 200 for a superuser."""
    response = admin_client.get(changelist_url(model))
    assert response.status_code == 200
    assert world.rows[model].pk in {obj.pk for obj in response.context["cl"].result_list}
    assert admin_client.get(change_url(world.rows[model])).status_code == 200


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_changelist_queries_do_not_grow_with_rows(admin_client: Client, model: type[Model]):
    """A changelist costs the same number of queries whether it shows one tenant's rows or three."""
    build_world("one")
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(changelist_url(model)).status_code == 200
    build_world("two")
    build_world("three")
    with CaptureQueriesContext(connection) as more:
        assert admin_client.get(changelist_url(model)).status_code == 200
    assert len(more.captured_queries) == len(few.captured_queries)


@pytest.mark.parametrize("model", IMMUTABLE, ids=lambda m: m._meta.label)
def test_immutable_models_are_read_only(admin_client: Client, world: World, model: type[Model]):
    """Immutable rows offer no add, change or delete, but their pages are viewable."""
    model_admin = admin.site._registry[model]
    request = admin_client.get(changelist_url(model)).wsgi_request
    obj = world.rows[model]
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, obj)
    assert not model_admin.has_delete_permission(request, obj)
    assert model_admin.has_view_permission(request, obj)
    opts = model._meta
    assert admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
    assert (
        admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_delete", args=[quote(obj.pk)])).status_code
        == 403
    )
    page = admin_client.get(change_url(obj))
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert admin_client.post(change_url(obj), {}).status_code == 403


@pytest.fixture
def operator(client: Client) -> tuple[Client, World, World]:
    """A staff user with every permission of the three apps, scoped to tenant A only."""
    world_a, world_b = build_world("tenant-a"), build_world("tenant-b")
    user = User.objects.create_user("operator-a", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    OperatorScope.objects.create(user=user, tenant=world_a.tenant)
    client.force_login(user)
    return client, world_a, world_b


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m._meta.label)
def test_operator_sees_only_their_tenant(operator: tuple[Client, World, World], model: type[Model]):
    """An operator scoped to tenant A sees none of tenant B's rows, and B's pages look missing."""
    client, world_a, world_b = operator
    response = client.get(changelist_url(model))
    assert response.status_code == 200
    shown = {obj.pk for obj in response.context["cl"].result_list}
    assert world_b.rows[model].pk not in shown
    if model in GLOBAL:
        assert shown == set()
    else:
        assert world_a.rows[model].pk in shown
        assert client.get(change_url(world_a.rows[model])).status_code == 200
    # The admin answers a missing object with a redirect to its index.
    assert client.get(change_url(world_b.rows[model])).status_code == 302


def test_operator_filters_and_choices_list_only_their_agents(operator: tuple[Client, World, World]):
    """The agent filter and foreign-key choices offer tenant A's agents only."""
    client, world_a, world_b = operator
    page = client.get(changelist_url(MemoryEntry)).content.decode()
    assert world_a.agent.name in page
    assert world_b.agent.name not in page
    filtered = client.get(changelist_url(MemoryEntry), {"agent": world_a.agent.pk}).context["cl"].result_list
    assert filtered and {e.agent_id for e in filtered} == {world_a.agent.pk}
    assert not client.get(changelist_url(MemoryEntry), {"agent": world_b.agent.pk}).context["cl"].result_list
    form = client.get(reverse("admin:accounts_connector_add")).context["adminform"].form
    assert set(form.fields["agent"].queryset) == {world_a.agent}


def test_operator_cannot_open_a_tenant(operator: tuple[Client, World, World]):
    client, _, _ = operator
    assert client.get(reverse("admin:accounts_tenant_add")).status_code == 403


def test_api_key_admin_never_shows_the_digest(admin_client: Client, world: World):
    api_key = world.rows[ApiKey]
    assert isinstance(api_key, ApiKey)
    for url in (changelist_url(ApiKey), change_url(api_key)):
        page = admin_client.get(url).content.decode()
        assert api_key.prefix in page
        assert api_key.digest not in page


def test_revoke_keys_action(admin_client: Client, world: World):
    api_key = world.rows[ApiKey]
    assert isinstance(api_key, ApiKey)
    response = admin_client.post(
        changelist_url(ApiKey), {"action": "revoke_keys", "_selected_action": [api_key.pk]}, follow=True
    )
    assert response.status_code == 200
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None


def test_issue_key_action_shows_the_secret_once(admin_client: Client, world: World):
    response = admin_client.post(
        changelist_url(RuntimeAgent), {"action": "issue_api_key", "_selected_action": [world.agent.pk]}, follow=True
    )
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 1
    secret = next(word for word in shown[0].split() if word.startswith("egk_"))
    assert ApiKey.objects.filter(agent=world.agent, digest=api_key_digest(secret)).exists()
    assert secret not in admin_client.get(changelist_url(ApiKey)).content.decode()


def test_forget_action_goes_through_the_service(admin_client: Client, world: World):
    """Forgetting from the admin retires the entry and records the ledger operation."""
    response = admin_client.post(
        changelist_url(MemoryEntry), {"action": "forget_entries", "_selected_action": [world.entry.pk]}, follow=True
    )
    assert response.status_code == 200
    world.entry.refresh_from_db()
    assert world.entry.status == EntryStatus.FORGOTTEN
    assert MemoryOperation.objects.filter(entry=world.entry, kind="forget").count() == 1


def test_entry_page_shows_current_revision_and_history(admin_client: Client, world: World):
    page = admin_client.get(change_url(world.entry)).content.decode()
    assert "Prefers green tea over coffee." in page  # current revision
    assert "Prefers tea over coffee." in page  # revision 1, in the inline
    assert page.index("Prefers green tea over coffee.") < page.index("Prefers tea over coffee.")
    assert str(world.alice.label) in page
    assert str(world.conversation.audience) in page


def test_conversation_shows_audience_and_saves_through_the_service(admin_client: Client, world: World):
    page = admin_client.get(changelist_url(Conversation)).content.decode()
    assert str(world.conversation.audience) in page
    response = admin_client.post(change_url(world.conversation), {"title": "#renamed", "project": "atlas"})
    assert response.status_code == 302
    world.conversation.refresh_from_db()
    assert (world.conversation.title, world.conversation.project) == ("#renamed", "atlas")
    assert world.conversation.audience == Audience.members(
        world.conversation.connector.namespace, world.conversation.audience_readers
    )


def test_message_search_uses_full_text(admin_client: Client, world: World):
    hits = admin_client.get(changelist_url(Message), {"q": "coffee"}).context["cl"].result_list
    assert [m.pk for m in hits] == [world.message.pk]
    assert list(admin_client.get(changelist_url(Message), {"q": "volcano"}).context["cl"].result_list) == []
