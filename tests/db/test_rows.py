"""Instances read with a hand-written statement (``config.rows``) equal the ORM's, converters included."""

from __future__ import annotations

import pytest
from django.db import connection

from config.rows import instances, select_list
from memory.models import RetrievalEvent
from tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def field_values(obj: object) -> dict[str, object]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}  # type: ignore[attr-defined]


def test_a_joined_row_builds_each_model_as_the_orm_does() -> None:
    agent = AgentFactory.create()
    event = RetrievalEvent.objects.create(
        agent=agent,
        destination_audience={"kind": "members", "namespace": "slack:T1", "readers": [3, 1]},
        selected_revision_ids=[7, 5],
        score_components={"7": {"lexical": 0.25, "recency": 1.0}},
        cost_tokens=42,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {select_list(RetrievalEvent, 'e')}, {select_list(type(agent), 'a')}"
            " FROM memory_retrievalevent e JOIN accounts_runtimeagent a ON a.id = e.agent_id WHERE e.id = %s",
            [event.pk],
        )
        read_event, read_agent = instances((RetrievalEvent, type(agent)), cursor.fetchone())

    assert isinstance(read_event, RetrievalEvent)
    assert field_values(read_event) == field_values(RetrievalEvent.objects.get(pk=event.pk))
    assert read_event.destination_audience == {"kind": "members", "namespace": "slack:T1", "readers": [3, 1]}
    assert field_values(read_agent) == field_values(type(agent).objects.get(pk=agent.pk))
    assert not read_event._state.adding and read_event._state.db == "default"
