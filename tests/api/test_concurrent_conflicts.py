"""A transaction PostgreSQL rolls back because it collided with a concurrent one (a deadlock, a
serialization failure) answers 409 ``concurrent_update`` with ``Retry-After``: nothing of it was
committed and the request may be sent again. It is not a database outage (503)."""

from __future__ import annotations

import threading

import pytest
import rest_framework.views  # noqa: F401  (loads DRF's settings, which name config.api, before it)
from django.db import InternalError, OperationalError, connection, transaction
from rest_framework.response import Response

from accounts.models import Tenant
from config.api import exception_handler

pytestmark = pytest.mark.django_db(transaction=True)


def handled(error: Exception) -> Response | None:
    """The answer the API's exception handler gives for ``error``."""
    return exception_handler(error, {})


def test_the_loser_of_a_real_deadlock_answers_409_concurrent_update() -> None:
    first, second = (
        Tenant.objects.create(slug="t-first", name="First"),
        Tenant.objects.create(slug="t-second", name="Second"),
    )
    both_locked = threading.Barrier(2, timeout=10)
    failures: list[OperationalError] = []

    def lock(mine: Tenant, theirs: Tenant) -> None:
        try:
            with transaction.atomic():
                Tenant.objects.select_for_update().get(pk=mine.pk)
                both_locked.wait()
                Tenant.objects.select_for_update().get(pk=theirs.pk)
        except OperationalError as error:
            failures.append(error)
        finally:
            connection.close()

    other = threading.Thread(target=lock, args=(second, first))
    other.start()
    lock(first, second)
    other.join(timeout=30)

    assert len(failures) == 1, failures  # PostgreSQL chose one victim; the other committed
    response = handled(failures[0])
    assert response is not None
    assert response.status_code == 409
    assert response.data["code"] == "concurrent_update"
    assert response["Retry-After"] == "1"


def test_a_lost_connection_still_answers_503_database_unavailable() -> None:
    with pytest.raises(OperationalError) as lost, connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    connection.close()
    response = handled(lost.value)
    assert response is not None
    assert response.status_code == 503
    assert response.data["code"] == "database_unavailable"


def test_a_write_refused_by_a_node_that_is_not_the_primary_answers_503_and_drops_the_connection() -> None:
    """A write that reaches a standby (during a failover) is the database being unavailable, not a
    server error; the connection is closed at the end of the request so the next one finds the leader."""
    with connection.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")  # what a standby answers, on this server
    try:
        with pytest.raises(InternalError) as refused:
            Tenant.objects.create(slug="t-read-only", name="Read only")
        response = handled(refused.value)
        assert response is not None
        assert response.status_code == 503
        assert response.data["code"] == "database_unavailable"
        assert response["Retry-After"] == "5"
        connection.close_if_unusable_or_obsolete()  # what Django does when the request ends
        assert connection.connection is None
    finally:
        connection.close()
    assert not Tenant.objects.filter(slug="t-read-only").exists()
