"""The demo workspace (``manage.py load_demo``) with a few turns run through the API on top of it, and
a scanner that looks for text in every table the database has.

Sam Lindqvist (``U03SAMLI``) is the person erased in the erasure tests. Their marker texts appear only
in what they wrote and what was learned from it: their cat Pixel, deuteranopia and Copenhagen (their
direct messages), and the Figma file "Atlas - v0 flows" (#general).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.models import Model

from accounts.models import Actor, RuntimeAgent
from history.models import Conversation, Turn
from memory.models import MemoryRevision
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.query import form_query
from memory.retrieval.service import recall, task_budget
from tests.api.conftest import Runtime, runtime_for

SAM = "U03SAMLI"
PRIYA = "U01PRIYA"
MARKERS = ("pixel", "deuteranopia", "copenhagen", "v0 flows")
DM_SAM = "D04SAMLI"
GENERAL = "C01GENERAL"

#: Column types that hold text (or text-derived data), and those that hold vectors.
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "tsvector")
TEXT_ARRAYS = ("_text", "_varchar")
VECTOR_UDTS = ("vector", "halfvec", "_float4", "_float8")


@dataclass
class DemoWorld:
    runtime: Runtime
    agent: RuntimeAgent
    sam: Actor
    priya: Actor
    dm_turn: int
    general_turn: int

    def recalled_bodies(self, thread: str, who: str, text: str) -> list[str]:
        requester = Actor.objects.get(connector__agent=self.agent, external_id=who)
        conversation = Conversation.objects.get(agent=self.agent, external_thread_id=thread)
        result = recall(
            perspective=perspective_for_conversation(conversation, requester_id=requester.pk),
            query=form_query(
                message=text,
                requester_id=requester.pk,
                known_actors=list(Actor.objects.filter(tenant=self.agent.tenant)),
            ),
            budget=task_budget(),
        )
        return list(
            MemoryRevision.objects.filter(pk__in=[i.revision_id for i in result.items]).values_list("body", flat=True)
        )

    def history_bodies(self, thread: str, who: str, text: str) -> list[str]:
        requester = Actor.objects.get(connector__agent=self.agent, external_id=who)
        conversation = Conversation.objects.get(agent=self.agent, external_thread_id=thread)
        perspective = perspective_for_conversation(conversation, requester_id=requester.pk)
        result = search_history(perspective=perspective, query=HistoryQuery(text=text))
        return [m.body for hit in result.hits for m in (hit.message, *hit.before, *hit.after)]


def say(runtime: Runtime, thread: str, actor: Actor, body: str, audience: dict[str, Any]) -> int:
    runtime.counter[0] += 1
    response = runtime.post(
        "/api/v1/messages",
        {
            "messages": [
                {
                    "connector": {"type": "slack", "name": "acme"},
                    "thread": {"external_id": thread, "audience": audience},
                    "actor": {"external_id": actor.external_id, "display_name": actor.display_name},
                    "external_id": f"erasure-{runtime.counter[0]}",
                    "body": body,
                    "created_at": f"2025-04-01T10:{runtime.counter[0]:02d}:00Z",
                    "evidence": {"method": "connector_signed"},
                }
            ]
        },
    )
    assert response.status_code == 201, response.json()
    return int(response.json()["messages"][0]["message_id"])


def turn(runtime: Runtime, thread: str, actor: Actor, body: str, audience: dict[str, Any]) -> int:
    message = say(runtime, thread, actor, body, audience)
    conversation = Conversation.objects.get(agent=runtime.agent, external_thread_id=thread)
    session = runtime.post("/api/v1/sessions", {"conversation_id": conversation.pk, "requester_actor_id": actor.pk})
    assert session.status_code == 201, session.json()
    started = runtime.post(f"/api/v1/sessions/{session.json()['session_id']}/turns", {"inbound_message_id": message})
    assert started.status_code == 201, started.json()
    return int(started.json()["turn_id"])


def build_demo_world() -> DemoWorld:
    """The demo, plus two delivered replies that depend on Sam: one in their DM citing the memory
    about their cat, and one in #general, to Priya, built from Sam's message found by history search."""
    call_command("load_demo")
    agent = RuntimeAgent.objects.get(tenant__slug="acme", name="acme-assistant")
    runtime = runtime_for(agent)
    sam = Actor.objects.get(connector__agent=agent, external_id=SAM)
    priya = Actor.objects.get(connector__agent=agent, external_id=PRIYA)
    cat = MemoryRevision.objects.get(body__contains="Pixel")

    dm_turn = turn(runtime, DM_SAM, sam, "What is my cat called again?", {"kind": "members", "readers": [SAM]})
    replied = runtime.reply(dm_turn, f"Your cat is called Pixel [{cat.short_id}].")
    assert replied.status_code == 201, replied.json()

    general_turn = turn(runtime, GENERAL, priya, "Where are the Atlas wireframes?", {"kind": "workspace"})
    searched = runtime.round(general_turn, {"verb": "search_history", "query": "wireframes Figma"})
    assert searched.status_code == 200, searched.json()
    replied = runtime.reply(general_turn, "They are in the Figma file 'Atlas - v0 flows'.")
    assert replied.status_code == 201, replied.json()
    reply = Turn.objects.get(pk=general_turn).reply
    assert reply is not None
    assert set(reply.history_message_ids) & set(sam.messages.values_list("pk", flat=True))
    return DemoWorld(runtime=runtime, agent=agent, sam=sam, priya=priya, dm_turn=dm_turn, general_turn=general_turn)


def scanned_columns() -> list[tuple[str, str, str]]:
    """(table, column, kind) for every column of every table in the database that holds text or
    vectors, read from ``information_schema`` so that a new table or column cannot be forgotten."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.table_name, c.column_name, c.data_type, c.udt_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            " ORDER BY c.table_name, c.ordinal_position"
        )
        rows = cursor.fetchall()
    columns = []
    for table, column, data_type, udt in rows:
        if data_type in TEXT_TYPES or udt in TEXT_ARRAYS:
            columns.append((table, column, "text"))
        elif udt in VECTOR_UDTS:
            columns.append((table, column, "vector"))
    return columns


def vector_values(model: type[Model], **lookup: Any) -> list[list[float]]:
    """The vectors of ``model``'s rows matching ``lookup``, from whichever of its columns the schema says
    holds vectors (the field's name and type may change; the schema is the authority)."""
    columns = {c for t, c, kind in scanned_columns() if t == model._meta.db_table and kind == "vector"}
    names = [f.name for f in model._meta.concrete_fields if f.column in columns]
    assert names, f"{model.__name__} has no vector column"
    return [
        [float(x) for x in v]
        for name in names
        for v in model._default_manager.filter(**lookup).values_list(name, flat=True)
    ]


def model_text_columns() -> set[tuple[str, str]]:
    """(table, column) of every concrete field of every installed model whose database type holds text,
    JSON, a text search vector or a vector."""
    found = set()
    for model in apps.get_models():
        for model_field in model._meta.concrete_fields:
            db_type = (model_field.db_type(connection) or "").lower()
            if any(kind in db_type for kind in ("text", "char", "json", "tsvector", "vector", "real[]")):
                found.add((model._meta.db_table, model_field.column))
    return found


def rows_with_text(markers: tuple[str, ...] = MARKERS) -> dict[str, int]:
    """How many rows of each text column mention any marker (case-insensitive)."""
    found: dict[str, int] = {}
    patterns = [f"%{marker}%" for marker in markers]
    with connection.cursor() as cursor:
        for table, column, kind in scanned_columns():
            if kind != "text":
                continue
            cursor.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text ILIKE ANY(%s)', [patterns])
            (count,) = cursor.fetchone()
            if count:
                found[f"{table}.{column}"] = count
    return found


def rows_with_vectors(vectors: list[list[float]]) -> dict[str, int]:
    """How many rows of each vector column hold one of ``vectors`` exactly."""
    found: dict[str, int] = {}
    if not vectors:
        return found
    literals = ["{" + ",".join(repr(x) for x in vector) + "}" for vector in vectors]
    with connection.cursor() as cursor:
        for table, column, kind in scanned_columns():
            if kind != "vector":
                continue
            cursor.execute(
                f'SELECT count(*) FROM "{table}" t JOIN unnest(%s::text[]) AS v(literal)'
                f' ON t."{column}"::real[] = v.literal::real[]',
                [literals],
            )
            (count,) = cursor.fetchone()
            if count:
                found[f"{table}.{column}"] = count
    return found
