"""The database router: writes and migrations go to the primary; reads inside a replica read scope
(``config.replica.routed_read``) go to the replica, every other read to the primary.

Reads outside a scope stay on the primary on purpose: a service that reads a row and then writes
depending on it must read what it writes against, never a replica's slightly older copy."""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

from config.replica import REPLICA_ALIAS, current_read_alias


class ReplicaRouter:
    def db_for_read(self, model: type, **hints: Any) -> str:
        # Explicit outside a scope too: a row read from the replica must not pull its relations from there later.
        return current_read_alias() or DEFAULT_DB_ALIAS

    def db_for_write(self, model: type, **hints: Any) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        # One database, two copies of it: rows read from either are the same rows.
        return True

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        # The replica is a physical copy: it receives the schema by streaming, never by migrating.
        return db != REPLICA_ALIAS
