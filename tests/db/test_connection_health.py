"""A persistent connection's health is judged without a round trip: a healthy idle connection is
reused as it is, and one the server has ended is found unusable, so the next request reconnects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

pytestmark = pytest.mark.django_db


@pytest.fixture
def other() -> Iterator[BaseDatabaseWrapper]:
    """A second connection to the test database, as a request or read worker holds one."""
    wrapper = connection.copy()
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()


def backend_pid(wrapper: BaseDatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def last_statement_of(pid: int) -> str:
    with connection.cursor() as cursor:
        # Activity is read from a snapshot taken once per transaction (and the test runs in one).
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        return str(cursor.fetchone()[0])


def test_a_healthy_idle_connection_is_usable_and_the_check_sends_nothing(other: BaseDatabaseWrapper) -> None:
    pid = backend_pid(other)
    with other.cursor() as cursor:
        cursor.execute("SELECT 'the last statement before the check'")

    assert other.is_usable()
    assert last_statement_of(pid) == "SELECT 'the last statement before the check'"
    # Between two requests: the next request's first statement runs on the same connection.
    other.close_if_unusable_or_obsolete()
    assert backend_pid(other) == pid


def test_a_connection_the_server_ended_is_unusable_and_is_replaced_on_next_use(other: BaseDatabaseWrapper) -> None:
    pid = backend_pid(other)
    with connection.cursor() as cursor:
        # What a restart or an administrator does to a backend; waits (up to 10 s) until it has exited.
        cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
        assert cursor.fetchone()[0] is True

    assert not other.is_usable()
    # Between two requests: the next request's first statement finds the connection ended (the
    # health check closes it) and runs on a new one.
    other.close_if_unusable_or_obsolete()
    assert backend_pid(other) != pid
    assert other.is_usable()
