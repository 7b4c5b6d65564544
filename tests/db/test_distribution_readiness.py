"""Readiness of the schema for Citus with ``agent_id`` as the distribution key (docs/scaling.md).

Every table is classified (distributed by agent, reference, or local to the coordinator). For the
distributed tables, the test finds every place where today's schema and hot queries do not carry the
distribution key, and requires that list to be exactly the one docs/scaling.md names in its
"Gaps" blocks, each with the change it needs. A new table, constraint or hot query without the key
fails the test until it is classified or documented; a gap closed in the schema fails it until the
document drops it. The gaps are reported, never hidden: the test does not pretend the schema is
ready where it is not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history.audience import Audience
from memory.retrieval.eligibility import perspective_for_conversation
from memory.retrieval.history_search import HistoryQuery, search_history
from memory.retrieval.query import form_query
from memory.retrieval.service import recall, task_budget
from tests.factories import ActorFactory, ConversationFactory, make_message, make_revision

pytestmark = pytest.mark.django_db

KEY = "agent_id"
DOC = Path(settings.BASE_DIR) / "docs" / "scaling.md"

#: Co-located shards of one agent: everything an eligibility decision reads.
DISTRIBUTED = {
    "accounts_actor",
    "accounts_connector",
    "accounts_identitylink",
    "accounts_useractor",
    "history_conversation",
    "history_conversationsearchevent",
    "history_message",
    "history_messagesearchdocument",
    "history_messagesourceevidence",
    "history_session",
    "history_turn",
    "memory_deletedrevision",
    "memory_indexoutbox",
    "memory_managementreadevent",
    "memory_memoryentry",
    "memory_memoryevidence",
    "memory_memoryoperation",
    "memory_memoryrevision",
    "memory_messageembedding",
    "memory_recallmiss",
    "memory_recalltrace",
    "memory_recalltraceitem",
    "memory_rejection",
    "memory_retrievalevent",
    "memory_revisionconflict",
    "memory_revisionembedding",
    "memory_revisionsearchdocument",
    "memory_sharingconsent",
    "memory_sharinggrant",
    "memory_sharingrequest",
}
#: Small, read on every request or by every shard: a copy on every node.
REFERENCE = {
    "accounts_tenant",
    "accounts_runtimeagent",
    "accounts_apikey",
    "accounts_operatorscope",
    "memory_embeddinggeneration",
    "auth_user",
}
#: Django's and django-axes' own bookkeeping, on the coordinator only.
LOCAL_PREFIXES = ("django_", "auth_", "axes_")
#: Written or read only by the coordinator: per-key request counters (an upsert on every request, which
#: a reference table would copy to every node) and erasure tombstones (a tenant's, across its agents).
LOCAL = {"accounts_apikeyratewindow", "memory_erasureevent"}


def documented(block: str) -> set[str]:
    """The items of the fenced block that follows ``<!-- gaps:<block> -->`` in docs/scaling.md."""
    text = DOC.read_text()
    match = re.search(rf"<!-- gaps:{block} -->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert match, f"docs/scaling.md has no gaps:{block} block"
    return {line.split("#")[0].strip() for line in match.group(1).splitlines() if line.split("#")[0].strip()}


def tables() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace"
        )
        return {name for (name,) in cursor.fetchall()}


def test_every_table_is_classified() -> None:
    """Each table is distributed by agent, a reference table, or local to the coordinator."""
    classified = DISTRIBUTED | REFERENCE | LOCAL
    unclassified = {t for t in tables() if t not in classified and not t.startswith(LOCAL_PREFIXES)}
    assert not unclassified, f"classify these tables in docs/scaling.md and this test: {sorted(unclassified)}"
    # Only the embedding tables may be absent: memory/0003 creates them where the server has pgvector.
    assert DISTRIBUTED - tables() <= {"memory_messageembedding", "memory_revisionembedding"}


def test_distributed_tables_without_the_key_are_the_documented_ones() -> None:
    """A distributed table must hold ``agent_id``; those that do not yet are exactly the documented gaps."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' AND column_name = %s",
            [KEY],
        )
        keyed = {name for (name,) in cursor.fetchall()}
    present = tables()
    missing = (DISTRIBUTED & present) - keyed
    expected = {table for table in documented("columns") if table in present}
    assert missing == expected, f"distributed tables without {KEY} today: {sorted(missing)}"


def test_keys_and_unique_constraints_without_the_key_are_the_documented_ones() -> None:
    """Citus enforces a primary key or unique constraint of a distributed table only when it includes
    the distribution column. Those that do not yet are exactly the documented gaps."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.conrelid::regclass::text, c.conname
              FROM pg_constraint c
             WHERE c.contype IN ('p', 'u') AND c.connamespace = 'public'::regnamespace
               AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                                WHERE a.attrelid = c.conrelid AND a.attnum = ANY(c.conkey) AND a.attname = %s)
            UNION ALL
            SELECT i.indrelid::regclass::text, x.relname
              FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
             WHERE i.indisunique AND x.relnamespace = 'public'::regnamespace
               AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
               AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                                WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) AND a.attname = %s)
            """,
            [KEY, KEY],
        )
        gaps = {f"{table}.{name}" for table, name in cursor.fetchall() if table in DISTRIBUTED}
    present = tables()
    expected = {gap for gap in documented("constraints") if gap.split(".", 1)[0] in present}
    assert gaps == expected, f"keys and unique constraints without {KEY}: {sorted(gaps)}"


#: ``FROM <table> <alias>`` / ``JOIN <table> <alias>`` in a captured statement (quoted or not).
TABLE_REF = re.compile(r'\b(?:FROM|JOIN)\s+"?(\w+)"?(?:\s+(?:AS\s+)?"?(\w+)"?)?', re.I)
SQL_WORDS = {"where", "on", "join", "left", "inner", "cross", "group", "order", "limit", "using", "lateral", "as"}


def unkeyed_tables(sql: str) -> set[str]:
    """Distributed tables a statement reads without an ``agent_id`` equality on that table's rows."""
    found: set[str] = set()
    for table, alias in TABLE_REF.findall(sql):
        if table not in DISTRIBUTED:
            continue
        unaliased = not alias or alias.lower() in SQL_WORDS
        names = {table} | (set() if unaliased else {alias})
        qualified = any(re.search(rf'\b"?{re.escape(name)}"?\."?{KEY}"?\s*(=|IN\b)', sql) for name in names)
        bare = unaliased and re.search(rf'(?<![.\w"]){KEY}\s*=', sql) is not None
        keyed = qualified or bare
        if not keyed:
            found.add(table)
    return found


def test_hot_queries_without_the_key_are_the_documented_ones() -> None:
    """The statements of a recall and of a history search name ``agent_id`` for every distributed
    table they read (so Citus routes each to one shard), except the documented ones."""
    connector = ConversationFactory.create().connector
    reader = ActorFactory.create(connector=connector)
    conversation = ConversationFactory.create(connector=connector)
    for n in range(3):
        make_revision(
            connector.agent, audience=Audience.workspace(connector.namespace), body=f"Deploys are on Friday {n}."
        )
        make_message(conversation, body=f"The deploy window is Friday {n}.", actor=reader)
    perspective = perspective_for_conversation(conversation, requester_id=reader.pk)
    with CaptureQueriesContext(connection) as captured:
        recall(
            perspective=perspective,
            query=form_query(message="when are deploys?", requester_id=reader.pk, known_actors=[]),
            budget=task_budget(),
        )
        search_history(perspective=perspective, query=HistoryQuery(text="deploy window Friday"))
    unkeyed: set[str] = set()
    for query in captured.captured_queries:
        if query["sql"].lstrip().upper().startswith(("SELECT", "WITH")):
            unkeyed |= unkeyed_tables(query["sql"])
    assert unkeyed == documented("queries"), f"hot reads without {KEY} on these tables: {sorted(unkeyed)}"
