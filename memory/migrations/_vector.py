"""Migration operations that touch the database only where the ``vector`` extension is installed.

The embedding tables exist only on a server with pgvector (their column is pgvector's ``vector``,
which no other server can declare). Their models are always in Django's migration state, so
``makemigrations`` stays exact and the code can name them; the database side of every operation on
them is wrapped in :class:`WhereVectorExtension`, which runs it only where ``memory/0002`` could
create the extension. A later migration that alters these models must be wrapped the same way.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState


def vector_extension_installed(connection: BaseDatabaseWrapper) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        return cursor.fetchone() is not None


def table_exists(connection: BaseDatabaseWrapper, table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
        row = cursor.fetchone()
        return bool(row and row[0])


class WhereVectorExtension(migrations.SeparateDatabaseAndState):
    """``operations`` in the migration state everywhere, in the database only where pgvector is.

    Forwards runs them where the extension is installed; backwards where ``probe_table`` (a table
    the forward operations created) exists, so rolling back a lexical-only database is a no-op too.
    """

    serialization_expand_args = ["operations"]

    def __init__(self, operations: list[Any], *, probe_table: str) -> None:
        super().__init__(database_operations=operations, state_operations=operations)
        self.operations = operations
        self.probe_table = probe_table

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__qualname__, [], {"operations": self.operations, "probe_table": self.probe_table}

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if vector_extension_installed(schema_editor.connection):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if table_exists(schema_editor.connection, self.probe_table):
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Where pgvector is installed: {'; '.join(op.describe() for op in self.operations)}"
