"""The migrations build the schema the models declare, from an empty database, and take it down again.

Each test here works on a database of its own, created empty beside the test database and dropped
afterwards: the test database itself is built by the same migrations, but once, before any test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pgtrigger
import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.loader import MigrationLoader
from django.db.models import Model

from config.database.sql import SQL_DIR, ApplySQL, created_functions, sql_version

#: The apps whose migrations build Engram's schema.
ENGRAM_APPS = ("accounts", "history", "memory")
#: The tables created only where the server has pgvector (memory/0003's WhereVectorExtension).
VECTOR_TABLES = {"memory_revisionembedding", "memory_messageembedding"}
#: A table with no model: per-key request counters (accounts/throttling.py).
UNMODELLED_TABLES = {"accounts_apikeyratewindow"}

ALIAS = "empty_for_migrations"


@pytest.fixture
def empty_database(django_db_blocker: Any) -> Iterator[BaseDatabaseWrapper]:
    """A connection to a new, empty database on the test database's server."""
    name = f"{connection.settings_dict['NAME']}_migrations"
    with django_db_blocker.unblock():
        _drop_and_create(name)
        connections.settings[ALIAS] = {**connection.settings_dict, "NAME": name}
        try:
            yield connections[ALIAS]
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]
            _drop_and_create(name, create=False)


def _drop_and_create(name: str, *, create: bool = True) -> None:
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            cursor.execute(f'CREATE DATABASE "{name}"')


def _migrate(*args: str) -> None:
    call_command("migrate", *args, database=ALIAS, verbosity=0, interactive=False)


def _fetch(db: BaseDatabaseWrapper, sql: str) -> list[tuple[Any, ...]]:
    with db.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def _engram_functions(db: BaseDatabaseWrapper) -> set[str]:
    return {name for (name,) in _fetch(db, "SELECT proname FROM pg_proc WHERE proname LIKE 'engram\\_%'")}


def _pgtriggers(db: BaseDatabaseWrapper) -> set[tuple[str, str]]:
    return set(
        _fetch(
            db,
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal AND t.tgname LIKE 'pgtrigger\\_%' AND t.tgenabled = 'O'",
        )
    )


def _tables(db: BaseDatabaseWrapper) -> set[str]:
    return set(db.introspection.table_names())


def _engram_models() -> list[type[Model]]:
    return [
        model
        for app in ENGRAM_APPS
        for model in apps.get_app_config(app).get_models()
        if model._meta.managed and not model._meta.proxy
    ]


def _has_pgvector(db: BaseDatabaseWrapper) -> bool:
    return bool(_fetch(db, "SELECT 1 FROM pg_extension WHERE extname = 'vector'"))


def _sql_files() -> list[str]:
    return sorted(path.name for path in SQL_DIR.glob("*.sql"))


def _assert_the_schema_is_the_models(db: BaseDatabaseWrapper) -> None:
    tables = _tables(db)
    expected_tables = {model._meta.db_table for model in _engram_models()} | UNMODELLED_TABLES
    if not _has_pgvector(db):
        expected_tables -= VECTOR_TABLES
    assert expected_tables - tables == set()

    with db.cursor() as cursor:
        for model in _engram_models():
            if model._meta.db_table not in tables:
                continue
            columns = {c.name for c in db.introspection.get_table_description(cursor, model._meta.db_table)}
            assert columns == {field.column for field in model._meta.concrete_fields}, model._meta.label
            constraints = set(db.introspection.get_constraints(cursor, model._meta.db_table))
            declared = {c.name for c in model._meta.constraints} | {i.name for i in model._meta.indexes}
            assert declared - constraints == set(), model._meta.label

    assert {function for name in _sql_files() for function in created_functions(name)} <= _engram_functions(db)
    declared_triggers = {
        (model._meta.db_table, trigger.get_pgid(model))
        for model, trigger in pgtrigger.registered()
        if model._meta.db_table in tables
    }
    assert _pgtriggers(db) == declared_triggers


def test_an_empty_database_migrates_to_the_schema_the_models_declare(empty_database: BaseDatabaseWrapper) -> None:
    _migrate()

    _assert_the_schema_is_the_models(empty_database)
    # ... and the migrations describe the models exactly: nothing is left for makemigrations to write.
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


def test_migrating_back_to_zero_removes_everything_and_forward_again_rebuilds_it(
    empty_database: BaseDatabaseWrapper,
) -> None:
    _migrate()
    built = _tables(empty_database)

    _migrate("accounts", "zero")  # history and memory depend on accounts, so they go first
    assert {t for t in _tables(empty_database) if t.split("_")[0] in ENGRAM_APPS} == set()
    assert _engram_functions(empty_database) == set()
    assert _pgtriggers(empty_database) == set()
    # (pgtrigger drops a trigger but leaves its function, which the next install replaces)

    _migrate()
    assert _tables(empty_database) == built
    _assert_the_schema_is_the_models(empty_database)


def test_api_keys_issued_before_scopes_existed_become_runtime_keys(empty_database: BaseDatabaseWrapper) -> None:
    """accounts/0002: an existing key keeps calling what an agent runtime calls, and only that."""
    _migrate("accounts", "0001")
    with empty_database.cursor() as cursor:
        cursor.execute(
            "INSERT INTO accounts_tenant (name, slug, created_at) VALUES ('Acme', 'acme', now()) RETURNING id"
        )
        (tenant_id,) = cursor.fetchone()
        cursor.execute(
            "INSERT INTO accounts_runtimeagent (tenant_id, name, created_at) VALUES (%s, 'bot', now()) RETURNING id",
            [tenant_id],
        )
        (agent_id,) = cursor.fetchone()
        cursor.execute(
            "INSERT INTO accounts_apikey (agent_id, label, prefix, digest, created_at)"
            " VALUES (%s, 'old', 'egk_0000', repeat('0', 64), now())",
            [agent_id],
        )

    _migrate("accounts", "0002")
    assert _fetch(empty_database, "SELECT label, scopes FROM accounts_apikey") == [("old", ["runtime"])]


def test_every_sql_file_has_a_version_marker_and_a_migration_that_applies_that_version() -> None:
    """Changing a file's rule means raising its version and adding a migration that re-applies it: a
    file whose version no migration applies has been edited without one (docs/schema.md)."""
    applied: dict[str, int] = {}
    for migration in MigrationLoader(None, ignore_no_migrations=True).disk_migrations.values():
        for operation in migration.operations:
            if isinstance(operation, ApplySQL):
                applied[operation.name] = max(applied.get(operation.name, 0), operation.version)

    assert _sql_files(), "no SQL files found"
    assert {name: sql_version(name) for name in _sql_files()} == applied


def test_every_function_of_an_sql_file_is_created_or_replaced_in_the_public_schema() -> None:
    """The files are re-applied over their own earlier versions, so each statement replaces in place."""
    for name in _sql_files():
        text = (SQL_DIR / name).read_text(encoding="utf-8")
        assert re.findall(r"^CREATE (?!OR REPLACE FUNCTION)\w+", text, flags=re.MULTILINE) == [], name
        assert created_functions(name), name


def test_existing_revisions_keep_their_single_source_and_requests_ask_their_confirmer(
    empty_database: BaseDatabaseWrapper,
) -> None:
    """Before source actors were recorded as a list, a revision had one source actor and a sharing
    request one confirmer: after the migration the revision rests on that one person's words, and the
    request asks that one person, in the state it was in."""
    _migrate("memory", "0003_embedding_tables")
    old = MigrationLoader(empty_database).project_state(("memory", "0003_embedding_tables")).apps
    db = ALIAS

    def make(label: str, **fields: Any) -> Any:
        app_label, model_name = label.split(".")
        return old.get_model(app_label, model_name).objects.using(db).create(**fields)

    tenant = make("accounts.Tenant", name="T", slug="t")
    agent = make("accounts.RuntimeAgent", tenant=tenant, name="a")
    connector = make("accounts.Connector", agent=agent, type="slack", name="acme")
    alice = make("accounts.Actor", tenant=tenant, connector=connector, external_id="U1", display_name="Alice")
    dm = make(
        "history.Conversation",
        agent=agent,
        connector=connector,
        external_thread_id="D1",
        audience_kind="members",
        audience_namespace="slack:acme",
        audience_readers=[alice.pk],
    )
    general = make(
        "history.Conversation",
        agent=agent,
        connector=connector,
        external_thread_id="C1",
        audience_kind="workspace",
        audience_namespace="slack:acme",
    )
    revisions = []
    for number, source in enumerate((alice, None), start=1):
        entry = make("memory.MemoryEntry", agent=agent)
        revisions.append(
            make(
                "memory.MemoryRevision",
                entry=entry,
                agent=agent,
                number=1,
                body=f"Statement {number}.",
                source_actor=source,
                belief_type="project_fact",
                created_by="remember",
                audience_kind="members",
                audience_namespace="slack:acme",
                audience_readers=[alice.pk],
            )
        )
    for state in ("pending", "approved"):
        make(
            "memory.SharingRequest",
            agent=agent,
            revision=revisions[0],
            conversation=general,
            confirmer=alice,
            state=state,
            audience_kind="workspace",
            audience_namespace="slack:acme",
        )
    assert dm.pk

    _migrate("memory")
    with empty_database.cursor() as cursor:
        cursor.execute("SELECT body, source_actor_ids FROM memory_memoryrevision ORDER BY id")
        assert cursor.fetchall() == [("Statement 1.", [alice.pk]), ("Statement 2.", [])]
        cursor.execute(
            "SELECT r.state, c.actor_id, c.role, c.state FROM memory_sharingconsent c"
            " JOIN memory_sharingrequest r ON r.id = c.request_id ORDER BY r.id"
        )
        assert cursor.fetchall() == [
            ("pending", alice.pk, "source", "pending"),
            ("approved", alice.pk, "source", "given"),
        ]
