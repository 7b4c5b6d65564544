"""The request path's fixed statements are prepared once a connection has run them often enough; every
other statement (the ORM's, and each one that judges what a perspective may see) is planned anew."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from accounts.models import Tenant
from config.database.base import prepared_cursor
from config.rows import fetch_one
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import RecallQuery
from memory.retrieval.service import recall, task_budget
from tests.factories import AgentFactory, ConnectorFactory, make_revision, public_channel

pytestmark = pytest.mark.django_db

#: psycopg's ``prepare_threshold``: a statement run this many times is prepared on its next run.
THRESHOLD = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_fixed_statement_is_prepared_once_run_past_the_threshold_and_never_when_preparing_is_off() -> None:
    """With ``ENGRAM_PREPARED_STATEMENTS=0`` (no threshold) the same runs prepare nothing."""
    tenant = Tenant.objects.create(slug="prepared", name="Prepared")
    lookup = "SELECT name FROM accounts_tenant WHERE id = %s AND slug <> 'never prepared elsewhere'"
    runs = (THRESHOLD if THRESHOLD is not None else 5) + 1

    for run in range(1, runs + 1):
        with prepared_cursor() as cursor:
            cursor.execute(lookup, [tenant.pk])
            assert cursor.fetchone() == ("Prepared",)
        prepared = [s for s in prepared_statements() if "never prepared elsewhere" in s]
        assert len(prepared) == (1 if THRESHOLD is not None and run > THRESHOLD else 0), run

    # The helpers that read rows by key use it.
    for _ in range(runs):
        assert fetch_one(Tenant, "x.id = %s AND x.slug <> 'read by key'", [tenant.pk]) == tenant
    assert any("read by key" in s for s in prepared_statements()) == (THRESHOLD is not None)


def test_orm_and_plain_cursor_statements_are_never_prepared() -> None:
    tenant = Tenant.objects.create(slug="unprepared", name="Unprepared")
    for _ in range((THRESHOLD or 0) + 2):
        assert Tenant.objects.filter(pk=tenant.pk, name="Unprepared").exists()
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM accounts_tenant WHERE id = %s AND slug <> 'plain cursor'", [tenant.pk])

    statements = prepared_statements()
    assert not any('"accounts_tenant"' in s for s in statements)
    assert not any("plain cursor" in s for s in statements)


def test_statements_that_judge_eligibility_are_planned_for_their_values_every_time() -> None:
    """A recall's arms embed the eligibility rules, whose best plan depends on the perspective: the
    recall finds its memory on every run, and its statements are never prepared."""
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent)
    room = public_channel(connector)
    memory = make_revision(agent, audience=room.audience, body="The holiday rota is posted on Fridays.")
    perspective = perspective_for_conversation(room)

    for _ in range((THRESHOLD or 0) + 2):
        result = recall(
            perspective=perspective, query=RecallQuery(text="holiday rota"), budget=task_budget(), providers=()
        )
        assert [item.revision_id for item in result.items] == [memory.pk]

    assert not any("engram_audience_allows" in s for s in prepared_statements())
