"""Append-only tables refuse UPDATE and DELETE in PostgreSQL itself, not just in Python.

Every attempt runs in its own ``transaction.atomic()`` so the refusal rolls back a savepoint and the
test can go on to prove the row is unchanged. The one sanctioned bypass is ``pgtrigger.ignore`` of
the table's ``append_only`` trigger, used only by the deletion-on-request and retention services.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pgtrigger
import pytest
from django.db import DatabaseError, models, transaction
from django.utils import timezone

from accounts.models import ApiScope
from accounts.services import api_key_create
from history.audience import Audience
from history.models import ConversationSearchEvent, EvidenceMethod, Message, MessageSourceEvidence
from memory.models import (
    EvidenceKind,
    ManagementEndpoint,
    ManagementReadEvent,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    Operation,
    RecallMoment,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RejectionKind,
    RetrievalEvent,
    SharingGrant,
)
from tests.db.helpers import World, execute, fetch_one
from tests.factories import ActorFactory, AgentFactory, direct_conversation, make_message, make_revision, public_channel

REFUSED = r"pgtrigger: Cannot"


def _workspace(world: World) -> Audience:
    return Audience.workspace(world.connector.namespace)


def _revision(world: World) -> MemoryRevision:
    # Not made current: a revision nothing PROTECTs, so a refused delete is the trigger's doing.
    return make_revision(world.agent, audience=_workspace(world), make_current=False)


def _evidence(world: World) -> MemoryEvidence:
    audience = _workspace(world)
    return MemoryEvidence.objects.create(
        revision=_revision(world),
        kind=EvidenceKind.OPERATOR,
        audience_kind=audience.kind,
        audience_namespace=audience.namespace,
    )


def _message(world: World) -> Message:
    return make_message(world.conversation, actor=world.actor, body="The launch slipped a week.", evidence=None)


def _source_evidence(world: World) -> MessageSourceEvidence:
    return MessageSourceEvidence.objects.create(message=_message(world), method=EvidenceMethod.CONNECTOR_SIGNED)


def _retrieval_event(world: World) -> RetrievalEvent:
    return RetrievalEvent.objects.create(agent=world.agent, query_digest="a" * 64, selected_revision_ids=[1, 2])


def _management_read(world: World) -> ManagementReadEvent:
    return ManagementReadEvent.objects.create(
        agent=world.agent,
        api_key=api_key_create(agent=world.agent, scopes=[ApiScope.MANAGE]).api_key,
        endpoint=ManagementEndpoint.MEMORIES_LIST,
        entry_ids=[1, 2],
    )


def _search_event(world: World) -> ConversationSearchEvent:
    return ConversationSearchEvent.objects.create(agent=world.agent, query_digest="b" * 64)


def _operation(world: World) -> MemoryOperation:
    revision = _revision(world)
    return MemoryOperation.objects.create(
        agent=world.agent, kind=Operation.REMEMBER, entry=revision.entry, revision=revision, revision_number=1
    )


def _rejection(world: World) -> Rejection:
    return Rejection.objects.create(
        agent=world.agent, user=world.user, revision=_revision(world), kind=RejectionKind.NOT_TRUE, fingerprint="f" * 64
    )


def _trace_item(world: World) -> RecallTraceItem:
    revision = _revision(world)
    audience = _workspace(world)
    trace = RecallTrace.objects.create(
        agent=world.agent,
        audience_kind=audience.kind,
        audience_namespace=audience.namespace,
        moment=RecallMoment.IN_TURN,
        profile="task",
        policy_version="test",
        as_of=timezone.now(),
        rendered_text="- the team ships on Thursdays",
        rendered_sha256=hashlib.sha256(b"- the team ships on Thursdays").hexdigest(),
    )
    return RecallTraceItem.objects.create(
        trace=trace, position=0, entry=revision.entry, revision=revision, band="high", score=1.0, reason="subject"
    )


@dataclass(frozen=True)
class AppendOnly:
    """An append-only model, how to make one leaf row of it, and a valid edit to attempt on it."""

    model: type[models.Model]
    build: Callable[[World], models.Model]
    field: str
    value: Any

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def column(self) -> str:
        field = self.model._meta.get_field(self.field)
        assert isinstance(field, models.Field) and field.column is not None
        return field.column

    @property
    def pk_column(self) -> str:
        pk = self.model._meta.pk
        assert pk is not None
        return pk.column

    @property
    def protect_uri(self) -> str:
        return f"{self.model._meta.label}:append_only"

    def snapshot(self, pk: Any) -> tuple[Any, ...] | None:
        """The whole row as PostgreSQL stores it, for before/after comparison."""
        return fetch_one(f"SELECT row_to_json(t)::text FROM {self.table} t WHERE {self.pk_column} = %s", [pk])


APPEND_ONLY = [
    pytest.param(AppendOnly(MemoryRevision, _revision, "body", "The team ships on Fridays."), id="MemoryRevision"),
    pytest.param(AppendOnly(MemoryEvidence, _evidence, "audience_namespace", "slack:elsewhere"), id="MemoryEvidence"),
    pytest.param(AppendOnly(Message, _message, "body", "The launch is on time."), id="Message"),
    pytest.param(
        AppendOnly(MessageSourceEvidence, _source_evidence, "method", EvidenceMethod.OPERATOR_IMPORT),
        id="MessageSourceEvidence",
    ),
    pytest.param(AppendOnly(RetrievalEvent, _retrieval_event, "query_digest", "c" * 64), id="RetrievalEvent"),
    pytest.param(
        AppendOnly(ConversationSearchEvent, _search_event, "query_digest", "c" * 64), id="ConversationSearchEvent"
    ),
    pytest.param(
        # What the turn page lists as the messages a search put in front of the agent.
        AppendOnly(ConversationSearchEvent, _search_event, "returned_message_ids", [1, 2]),
        id="ConversationSearchEvent.returned_message_ids",
    ),
    pytest.param(AppendOnly(MemoryOperation, _operation, "kind", Operation.FORGET), id="MemoryOperation"),
    pytest.param(AppendOnly(Rejection, _rejection, "correction", "It was never true."), id="Rejection"),
    pytest.param(AppendOnly(RecallTraceItem, _trace_item, "reason", "rewritten history"), id="RecallTraceItem"),
    pytest.param(AppendOnly(ManagementReadEvent, _management_read, "entry_ids", [3]), id="ManagementReadEvent"),
]


@pytest.mark.parametrize("case", APPEND_ONLY)
def test_raw_sql_update_is_refused_and_the_row_is_unchanged(world: World, case: AppendOnly) -> None:
    """An append-only row refuses UPDATE in the database, even through raw SQL, and stays as it was."""
    row = case.build(world)
    before = case.snapshot(row.pk)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"UPDATE {case.table} SET {case.column} = %s WHERE {case.pk_column} = %s", [case.value, row.pk])

    assert case.snapshot(row.pk) == before


@pytest.mark.parametrize("case", APPEND_ONLY)
def test_raw_sql_delete_is_refused_and_the_row_remains(world: World, case: AppendOnly) -> None:
    """An append-only row refuses DELETE in the database, even through raw SQL, and is still there after."""
    row = case.build(world)
    before = case.snapshot(row.pk)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"DELETE FROM {case.table} WHERE {case.pk_column} = %s", [row.pk])

    assert before is not None
    assert case.snapshot(row.pk) == before


@pytest.mark.parametrize("case", APPEND_ONLY)
def test_the_orm_cannot_update_or_delete_either(world: World, case: AppendOnly) -> None:
    """``save()``, ``QuerySet.update()`` and ``delete()`` are refused just like raw SQL."""
    row = case.build(world)
    before = case.snapshot(row.pk)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        case.model._default_manager.filter(pk=row.pk).update(**{case.field: case.value})
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        setattr(row, case.field, case.value)
        row.save()
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        case.model._default_manager.get(pk=row.pk).delete()

    assert case.snapshot(row.pk) == before


@pytest.mark.parametrize("case", APPEND_ONLY)
def test_the_sanctioned_bypass_lets_a_delete_through_for_its_block_only(world: World, case: AppendOnly) -> None:
    """Inside ``pgtrigger.ignore("<app>.<Model>:append_only")`` a DELETE succeeds; after the block the
    table is append-only again."""
    doomed, survivor = case.build(world), case.build(world)

    with pgtrigger.ignore(case.protect_uri):
        deleted = execute(f"DELETE FROM {case.table} WHERE {case.pk_column} = %s", [doomed.pk])

    assert deleted == 1
    assert case.snapshot(doomed.pk) is None
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"DELETE FROM {case.table} WHERE {case.pk_column} = %s", [survivor.pk])
    assert case.snapshot(survivor.pk) is not None


# --- SharingGrant: revocable once, otherwise frozen ---------------------------------------------------


def _grant(world: World) -> SharingGrant:
    audience = Audience.members(world.connector.namespace, [world.actor.pk])
    return SharingGrant.objects.create(
        agent=world.agent,
        revision=make_revision(world.agent, audience=_workspace(world)),
        conversation=direct_conversation(world.connector, world.actor),
        granted_by_actor=world.actor,
        audience_kind=audience.kind,
        audience_namespace=audience.namespace,
        audience_readers=list(audience.readers),
    )


def _grant_row(grant: SharingGrant) -> tuple[Any, ...] | None:
    return fetch_one("SELECT row_to_json(g)::text FROM memory_sharinggrant g WHERE id = %s", [grant.pk])


def test_a_grant_can_be_revoked_once(world: World) -> None:
    """Setting ``revoked_at`` on a live grant, and nothing else, is allowed (raw SQL or ``save()``)."""
    by_sql, by_orm = _grant(world), _grant(world)

    assert execute("UPDATE memory_sharinggrant SET revoked_at = now() WHERE id = %s", [by_sql.pk]) == 1
    by_orm.revoked_at = timezone.now()
    by_orm.save()

    by_sql.refresh_from_db()
    by_orm.refresh_from_db()
    assert by_sql.revoked_at is not None
    assert by_orm.revoked_at is not None


def test_a_revoked_grant_cannot_be_re_revoked_or_un_revoked(world: World) -> None:
    """Once revoked, ``revoked_at`` is frozen: neither a new timestamp nor NULL (un-revoking) is accepted."""
    grant = _grant(world)
    execute("UPDATE memory_sharinggrant SET revoked_at = now() - interval '1 day' WHERE id = %s", [grant.pk])
    before = _grant_row(grant)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute("UPDATE memory_sharinggrant SET revoked_at = now() WHERE id = %s", [grant.pk])
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute("UPDATE memory_sharinggrant SET revoked_at = NULL WHERE id = %s", [grant.pk])

    assert _grant_row(grant) == before


def _other_value(world: World, grant: SharingGrant, column: str) -> Any:
    """A valid new value for one grant column (so only the trigger can be the reason for a refusal)."""
    if column == "agent_id":
        return AgentFactory.create(tenant=world.agent.tenant).pk
    if column == "revision_id":
        return make_revision(world.agent, audience=_workspace(world)).pk
    if column == "granted_by_actor_id":
        return ActorFactory.create(connector=world.connector).pk
    if column == "conversation_id":
        return public_channel(world.connector).pk
    if column == "audience_namespace":
        return "slack:elsewhere"
    if column == "audience_readers":
        return [world.actor.pk, world.actor.pk + 1000]
    if column == "created_at":
        return grant.created_at - timedelta(days=30)
    if column == "id":
        return grant.pk + 100_000
    raise AssertionError(column)


GRANT_COLUMNS = [
    "agent_id",
    "revision_id",
    "conversation_id",
    "granted_by_actor_id",
    "audience_namespace",
    "audience_readers",
    "created_at",
    "id",
]


@pytest.mark.parametrize("column", GRANT_COLUMNS)
def test_no_other_grant_column_can_change_even_alongside_a_revocation(world: World, column: str) -> None:
    """Editing any other column of a grant is refused, whether alone or smuggled into the revoking UPDATE."""
    grant = _grant(world)
    before = _grant_row(grant)
    value = _other_value(world, grant, column)

    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"UPDATE memory_sharinggrant SET {column} = %s WHERE id = %s", [value, grant.pk])
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        execute(f"UPDATE memory_sharinggrant SET {column} = %s, revoked_at = now() WHERE id = %s", [value, grant.pk])

    assert _grant_row(grant) == before


def test_a_grant_cannot_be_deleted_revoked_or_not(world: World) -> None:
    """A grant refuses DELETE (raw SQL and ORM), live or revoked: revocation is the only way to end it."""
    live, revoked = _grant(world), _grant(world)
    execute("UPDATE memory_sharinggrant SET revoked_at = now() WHERE id = %s", [revoked.pk])

    for grant in (live, revoked):
        with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
            execute("DELETE FROM memory_sharinggrant WHERE id = %s", [grant.pk])
        with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
            SharingGrant.objects.get(pk=grant.pk).delete()

    assert SharingGrant.objects.filter(pk__in=[live.pk, revoked.pk]).count() == 2


def test_entries_stay_mutable_handles(world: World) -> None:
    """The entry is the mutable handle (current revision, status, utility): it is not append-only."""
    revision = make_revision(world.agent, audience=_workspace(world))
    assert MemoryEntry.objects.filter(pk=revision.entry_id).update(utility=0.5, flagged_for_review=True) == 1
