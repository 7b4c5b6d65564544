"""The full-text sidecars and the index outbox are kept by triggers, so no write path can forget them.

Messages and revisions are append-only, so the body and agent edits below run under
``pgtrigger.ignore`` of the protect trigger, exactly as the sanctioned deletion/retention path would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pgtrigger
import pytest
from django.db import models, transaction

from history.audience import Audience
from history.models import Message
from memory.models import IndexOutbox, MemoryRevision, OutboxTarget
from tests.db.helpers import World, execute, fetch_one
from tests.factories import AgentFactory, make_message, make_revision


def _message(world: World, body: str) -> Message:
    return make_message(world.conversation, actor=world.actor, body=body, evidence=None)


def _revision(world: World, body: str) -> MemoryRevision:
    return make_revision(
        world.agent, audience=Audience.workspace(world.connector.namespace), body=body, make_current=False
    )


@dataclass(frozen=True)
class Indexed:
    """A text-bearing model, its sidecar table and key, and its outbox target."""

    model: type[models.Model]
    build: Callable[[World, str], models.Model]
    sidecar: str
    key: str
    outbox_target: str
    other_column: str  # a column whose change is not a reason to re-index

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def protect_uri(self) -> str:
        return f"{self.model._meta.label}:append_only"

    def sidecar_row(self, pk: Any) -> tuple[Any, ...] | None:
        return fetch_one(f"SELECT agent_id, tsv::text FROM {self.sidecar} WHERE {self.key} = %s", [pk])

    def matches(self, pk: Any, words: str) -> bool:
        row = fetch_one(
            f"SELECT tsv @@ plainto_tsquery('english', %s) FROM {self.sidecar} WHERE {self.key} = %s", [words, pk]
        )
        assert row is not None, "no sidecar row"
        return bool(row[0])


INDEXED = [
    pytest.param(
        Indexed(Message, _message, "history_messagesearchdocument", "message_id", OutboxTarget.MESSAGE, "created_at"),
        id="Message",
    ),
    pytest.param(
        Indexed(
            MemoryRevision, _revision, "memory_revisionsearchdocument", "revision_id", OutboxTarget.REVISION, "salience"
        ),
        id="MemoryRevision",
    ),
]

BODY = "The quarterly budgets were approved by the finance committee."


@pytest.mark.parametrize("case", INDEXED)
def test_insert_creates_the_sidecar_with_agent_and_tsvector(world: World, case: Indexed) -> None:
    """Inserting the row creates its sidecar, carrying the agent id and a tsvector of the body."""
    row = case.build(world, BODY)

    sidecar = case.sidecar_row(row.pk)
    assert sidecar is not None
    assert sidecar[0] == world.agent.pk
    assert case.matches(row.pk, "quarterly budget approval")
    assert not case.matches(row.pk, "holiday rota")


@pytest.mark.parametrize("case", INDEXED)
def test_a_body_change_re_indexes(world: World, case: Indexed) -> None:
    """Changing the body (sanctioned path only) rewrites the sidecar's tsvector to the new text."""
    row = case.build(world, BODY)

    with pgtrigger.ignore(case.protect_uri):
        execute(f"UPDATE {case.table} SET body = %s WHERE id = %s", ["Holiday rota for December.", row.pk])

    assert case.matches(row.pk, "holiday rota")
    assert not case.matches(row.pk, "quarterly budget")


@pytest.mark.parametrize("case", INDEXED)
def test_an_agent_change_moves_the_sidecar(world: World, case: Indexed) -> None:
    """Moving the row to another agent moves the sidecar's derived ``agent_id`` with it."""
    row = case.build(world, BODY)
    other = AgentFactory.create(tenant=world.agent.tenant)

    with pgtrigger.ignore(case.protect_uri):
        execute(f"UPDATE {case.table} SET agent_id = %s WHERE id = %s", [other.pk, row.pk])

    sidecar = case.sidecar_row(row.pk)
    assert sidecar is not None
    assert sidecar[0] == other.pk
    assert case.matches(row.pk, "quarterly budget")


@pytest.mark.parametrize("case", INDEXED)
def test_a_no_op_update_does_not_rewrite_the_sidecar(world: World, case: Indexed) -> None:
    """An UPDATE that leaves body and agent as they were, or touches only other columns, does not fire
    the sidecar trigger: a tampered sidecar row stays tampered, proving no rewrite happened."""
    row = case.build(world, BODY)
    execute(
        f"UPDATE {case.sidecar} SET agent_id = -1, tsv = to_tsvector('english', 'tampered') WHERE {case.key} = %s",
        [row.pk],
    )
    tampered = case.sidecar_row(row.pk)

    with pgtrigger.ignore(case.protect_uri):
        assert execute(f"UPDATE {case.table} SET body = body, agent_id = agent_id WHERE id = %s", [row.pk]) == 1
        column = case.other_column
        assert execute(f"UPDATE {case.table} SET {column} = {column} WHERE id = %s", [row.pk]) == 1

    assert case.sidecar_row(row.pk) == tampered


@pytest.mark.parametrize("case", INDEXED)
def test_deleting_the_row_cascades_to_the_sidecar_in_the_database(world: World, case: Indexed) -> None:
    """Deleting the row (sanctioned path, raw SQL) removes its sidecar row through ON DELETE CASCADE."""
    row = case.build(world, BODY)
    kept = case.build(world, BODY)

    with pgtrigger.ignore(case.protect_uri):
        execute(f"DELETE FROM {case.table} WHERE id = %s", [row.pk])

    assert case.sidecar_row(row.pk) is None
    assert case.sidecar_row(kept.pk) is not None


@pytest.mark.parametrize("case", INDEXED)
def test_insert_queues_index_work_in_the_same_transaction(world: World, case: Indexed) -> None:
    """Inserting the row writes exactly one pending ``IndexOutbox`` row in the same transaction: both
    carry the same ``xmin``, and rolling the insert back takes the outbox row with it."""
    row = case.build(world, BODY)

    outbox = IndexOutbox.objects.get(target=case.outbox_target, target_id=row.pk)
    assert outbox.processed_at is None
    assert outbox.attempts == 0
    row_xmin = fetch_one(f"SELECT xmin::text FROM {case.table} WHERE id = %s", [row.pk])
    outbox_xmin = fetch_one("SELECT xmin::text FROM memory_indexoutbox WHERE id = %s", [outbox.pk])
    assert row_xmin == outbox_xmin

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        rolled_back = case.build(world, BODY)
        assert IndexOutbox.objects.filter(target=case.outbox_target, target_id=rolled_back.pk).exists()
        raise Rollback
    assert not IndexOutbox.objects.filter(target=case.outbox_target, target_id=rolled_back.pk).exists()
