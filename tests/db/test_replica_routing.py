"""Read routing to a streaming replica (config.replica, config.routers): where a read is served.

These run on a real hot standby (``tests.replica``): reads land there only when it has replayed every
commit made before them, a transaction that wrote reads its own rows on the primary, a replica that
cannot be reached costs the caller nothing, and the replica never takes a write or a migration.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection, connections, router, transaction
from django.test import Client

from config import replica
from config.replica import ReplicaStats, choose_read_alias, on_primary, routed_read
from history.models import Conversation
from memory.models import RecallTrace
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import recall, task_budget
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


@routed_read
def _server_is_replica() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        return bool(cursor.fetchone()[0])


@routed_read
def _conversation_count() -> int:
    return Conversation.objects.count()


def test_without_a_replica_every_read_is_the_primarys() -> None:
    """With no replica configured a routed read runs on the primary, and the router sends it there."""
    assert not replica.replica_configured()
    assert choose_read_alias() == DEFAULT_DB_ALIAS
    assert _server_is_replica() is False
    assert router.db_for_read(Conversation) == DEFAULT_DB_ALIAS


def test_a_routed_read_is_served_by_the_replica(routed_replica: ReplicaStats) -> None:
    """Outside a transaction, a routed read runs on the hot standby; the ORM inside it reads there too."""
    assert _server_is_replica() is True
    assert routed_replica.served == 1


def test_a_read_sees_every_commit_made_before_it(routed_replica: ReplicaStats) -> None:
    """Read-your-writes across the two servers: rows committed on the primary just before a routed
    read are visible to it, because it waits until the replica has replayed the primary's position."""
    before = _conversation_count()
    for _n in range(5):
        ConversationFactory()
        assert _conversation_count() > before
        before = _conversation_count()
    assert routed_replica.served == 11
    assert not routed_replica.lagging


def test_a_transaction_that_wrote_reads_the_primary(routed_replica: ReplicaStats) -> None:
    """Inside a transaction that has written, routed reads stay on the primary, where its uncommitted
    rows are; a transaction that has only read may still read the replica."""
    with transaction.atomic():
        assert _server_is_replica() is True
        ConversationFactory()
        assert _server_is_replica() is False
        assert _conversation_count() == Conversation.objects.count()
    assert routed_replica.primary_wrote == 2


def test_the_audit_of_a_replica_read_is_written_on_the_primary(routed_replica: ReplicaStats) -> None:
    """A recall served by the replica writes its trace on the primary (a standby refuses writes)."""
    conversation = ConversationFactory.create()
    result = recall(
        perspective=perspective_for_conversation(conversation),
        query=form_query(message="what does Victor like?", requester_id=None, known_actors=[]),
        budget=task_budget(),
    )
    assert routed_replica.served == 1
    assert routed_replica.failed == 0  # the trace was not first tried on the standby
    assert RecallTrace.objects.filter(pk=result.trace_id).exists()


def test_a_write_inside_a_replica_read_fails_loudly(routed_replica: ReplicaStats) -> None:
    """A routed function that writes outside ``on_primary`` is refused by the standby and run again on
    the primary: the write is never silently lost, and the caller still gets its answer."""

    @routed_read
    def writes() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TEMPORARY TABLE routed_write_probe (x int)")
            cursor.execute("SELECT pg_is_in_recovery()")
            return bool(cursor.fetchone()[0])

    assert writes() is False  # the second run, on the primary
    assert routed_replica.failed == 1


def test_on_primary_inside_a_replica_read_uses_the_primary(routed_replica: ReplicaStats) -> None:
    """``on_primary`` switches back for its block only."""

    @routed_read
    def both() -> tuple[bool, bool, bool]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_is_in_recovery()")
            outer = bool(cursor.fetchone()[0])
        with on_primary(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_is_in_recovery()")
            inner = bool(cursor.fetchone()[0])
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_is_in_recovery()")
            after = bool(cursor.fetchone()[0])
        return outer, inner, after

    assert both() == (True, False, True)


def test_an_unreachable_replica_falls_back_to_the_primary(routed_replica: ReplicaStats, tmp_path: Path) -> None:
    """A stopped replica (nothing listens where it was) costs the caller nothing: the read runs on the
    primary, and the replica is not asked again until the retry interval has passed."""
    connections[replica.REPLICA_ALIAS].close()
    connections[replica.REPLICA_ALIAS].settings_dict["HOST"] = str(tmp_path)
    assert _server_is_replica() is False
    assert _conversation_count() == Conversation.objects.count()
    assert routed_replica.unavailable == 1  # the second read did not try it again
    assert routed_replica.served == 0
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_replica_is_never_written_or_migrated() -> None:
    """The router sends every write to the primary and refuses migrations on the replica alias."""
    assert router.db_for_write(Conversation) == DEFAULT_DB_ALIAS
    assert router.allow_migrate(replica.REPLICA_ALIAS, "history") is False
    assert router.allow_migrate(DEFAULT_DB_ALIAS, "history") is True


def test_the_turn_view_and_the_admin_lists_read_the_replica(routed_replica: ReplicaStats, client: Client) -> None:
    """The end user's turn list and the admin's lists are read on the replica, and a standby's refusal
    of a write never had to send them back to the primary."""
    user = get_user_model().objects.create_superuser("operator", "op@example.com", "pw-for-tests-only")
    client.force_login(user)
    assert client.get("/turns/").status_code == 200
    assert client.get("/admin/memory/memoryentry/").status_code == 200
    assert client.get("/admin/history/conversation/").status_code == 200
    assert routed_replica.served == 3
    assert routed_replica.failed == 0
