"""Raw-SQL helpers and the small world the database-invariant tests share.

Rows are made with the ORM directly, never through services: these tests check what PostgreSQL itself
enforces, whatever code path writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import connection

from accounts.models import Actor, Connector, RuntimeAgent
from history.models import Conversation


@dataclass
class World:
    agent: RuntimeAgent
    connector: Connector
    actor: Actor
    conversation: Conversation
    user: User


def fetch_one(sql: str, params: list[Any] | tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def execute(sql: str, params: list[Any] | tuple[Any, ...] = ()) -> int:
    """Run one raw statement; returns the number of rows it touched."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
