"""Recall runs a fixed number of SQL statements, however many items it returns (no per-item queries)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from history.models import EvidenceMethod
from history.services import message_ingest
from memory.embeddings.index import semantic_enabled
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.query import form_query
from memory.retrieval.service import RecallResult, recall, task_budget
from memory.services import Belief, Provenance, memory_remember
from tests.factories import ActorFactory, AgentFactory, ConnectorFactory, public_channel

pytestmark = pytest.mark.django_db

#: The statements of one lexical recall: whether the agent has revisions of unknown provenance to
#: count (1), the arms with the hydration of their hits (1), actor labels (1), and the trace write:
#: one insert of the trace with its items and retrieval event (1), with no savepoint of its own
#: inside the caller's transaction. Where pgvector exists, one more: the semantic arm's
#: live-generation lookup (none exists here).
LEXICAL_RECALL_QUERIES = 4

PLACES = (
    "Lisbon",
    "Berlin",
    "Porto",
    "Madrid",
    "Oslo",
    "Krakow",
    "Vienna",
    "Dublin",
    "Turin",
    "Ghent",
    "Bergen",
    "Riga",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def test_recall_query_count_does_not_grow_with_the_items_returned() -> None:
    """A recall returning 3 items and one returning 12 run the same 4 statements (5 with pgvector:
    the generation lookup): the unknown-provenance check, the arms with their hydration, one
    batched label lookup and the trace write (one insert of the trace, its items and its event).
    Subjects and sources differ per item, so any per-item label, evidence or trace query would show
    up as a difference."""
    agent = AgentFactory.create()
    connector = ConnectorFactory.create(agent=agent, type="slack", name="acme")
    people = [ActorFactory.create(connector=connector, display_name=f"Person{i}") for i in range(12)]
    channel = public_channel(connector, project="atlas")

    def remember(body: str, index: int) -> None:
        message = message_ingest(
            conversation=channel,
            actor=people[index],
            body=body,
            created_at=timezone.now(),
            evidence_method=EvidenceMethod.CONNECTOR_SIGNED,
        ).message
        memory_remember(
            agent=agent,
            belief=Belief(body=body, subject_id=people[(index + 1) % 12].pk),
            provenance=Provenance(source_message_id=message.pk),
        )

    for i in range(3):
        remember(f"The kestrel team meets in {PLACES[i]} on {DAYS[i % 6]}.", i)
    for i in range(12):
        remember(f"The osprey rollout in {PLACES[i]} finishes on {DAYS[i % 6]} week {i + 2}.", i)

    def run(text: str) -> tuple[RecallResult, int]:
        with CaptureQueriesContext(connection) as captured:
            result = recall(
                perspective=perspective_for_conversation(channel, requester_id=people[0].pk),
                query=form_query(message=text, requester_id=people[0].pk, known_actors=people),
                budget=task_budget(max_items=12),
            )
        return result, len(captured)

    expected = LEXICAL_RECALL_QUERIES + int(semantic_enabled())  # the extension check is cached per process
    few, few_queries = run("kestrel")
    many, many_queries = run("osprey")

    assert (len(few.items), len(many.items)) == (3, 12)
    assert few_queries == many_queries == expected
