"""Engram's SQL functions, one file per group, and the migration operation that applies them.

Each ``*.sql`` file in this folder is the whole current definition of a group of functions (the
audience rule, search terms, the lineage fold, the lineage rule's read side), written as
``CREATE OR REPLACE`` statements, and starts with a version marker (``-- version: N``). Migrations never
carry the SQL themselves: :class:`ApplySQL` reads the file as it is when the migration runs. So changing
a rule is one reviewable diff of its file, with the version raised, plus a migration whose only
operation is ``ApplySQL("<file>", version=N)`` (docs/schema.md); ``tests/db/test_migrations.py`` fails
while a file's version has no migration that applies it.

A database migrated from empty therefore runs each file as it is today, at the first migration that
applies it, and again at every later one. Function bodies are not checked against the schema when a
file is applied (``check_function_bodies`` off, as ``pg_dump`` restores do): the current text may read
a column that a later migration adds, before the later migration re-applies it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState

SQL_DIR = Path(__file__).resolve().parent

_VERSION_MARKER = re.compile(r"\A-- version: (\d+)\n")
_CREATED_FUNCTION = re.compile(r"^CREATE OR REPLACE FUNCTION (\w+)\(", re.MULTILINE)


def sql_text(name: str) -> str:
    """The current text of ``name`` (a file in this folder)."""
    return (SQL_DIR / name).read_text(encoding="utf-8")


def sql_version(name: str) -> int:
    """The version marker on the first line of ``name``."""
    marker = _VERSION_MARKER.match(sql_text(name))
    if marker is None:
        raise ValueError(f"{name} does not start with a '-- version: N' line")
    return int(marker.group(1))


def created_functions(name: str) -> list[str]:
    """The functions ``name`` defines, in order."""
    return _CREATED_FUNCTION.findall(sql_text(name))


class ApplySQL(migrations.operations.base.Operation):
    """Run the current text of one of this folder's files; it does not change Django's model state.

    ``version`` is the file's version this migration was written for; the file may be newer (a later
    migration applies it again), never older. Reversing the migration that first applied a file
    (``version=1``) drops its functions; reversing a later one leaves the functions as they are, since
    an earlier text is not kept here but in version control.
    """

    reduces_to_sql = True
    reversible = True

    def __init__(self, name: str, *, version: int) -> None:
        self.name = name
        self.version = version

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return self.__class__.__qualname__, [self.name], {"version": self.version}

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        pass

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        current = sql_version(self.name)
        if current < self.version:
            raise ValueError(f"{self.name} is at version {current}; this migration needs version {self.version}")
        schema_editor.execute("SET LOCAL check_function_bodies = off")
        schema_editor.execute(sql_text(self.name), params=None)
        schema_editor.execute("RESET check_function_bodies")

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if self.version != 1:
            return
        for function in reversed(created_functions(self.name)):
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {function}")

    def describe(self) -> str:
        return f"Apply config/database/sql/{self.name} (version {self.version})"

    @property
    def migration_name_fragment(self) -> str:
        return f"apply_{Path(self.name).stem}_sql"
