"""Model instances read with one hand-written statement: a row and the rows it joins, as the ORM's
``select_related`` would build them.

The request path reads a few rows by primary key on every call (a turn with its session and
conversation). The ORM compiles such a query anew each time, which costs several times the query's
own round trip in CPU; the statement text here is built once per process from the models' metadata,
so only the values change. Columns are selected in each model's ``concrete_fields`` order and pass
through the same database converters the ORM applies (``from_db_value``), so an instance read here
equals one the ORM reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from config.database.base import prepared_cursor

Converter = Callable[[Any, Any, Any], Any]
M = TypeVar("M", bound=Model)


@functools.cache
def select_list(model: type[Model], alias: str) -> str:
    """``alias.column, …`` for every concrete field of ``model``, in ``concrete_fields`` order."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


@functools.cache
def _shape(model: type[Model]) -> tuple[list[str], list[tuple[int, list[Converter], Any]]]:
    db = connections[DEFAULT_DB_ALIAS]
    fields = model._meta.concrete_fields
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        found = db.ops.get_db_converters(column) + field.get_db_converters(db)  # type: ignore[attr-defined]
        if found:
            converters.append((index, found, column))
    return [field.attname for field in fields], converters


def fetch_where(model: type[M], where: str, params: Sequence[Any], *, lock: bool = False) -> list[M]:
    """The rows of ``model`` (aliased ``x``) matching ``where``; ``lock`` takes their row locks.

    ``where`` is a constant of the caller's, so the statement's text is the same on every call."""
    sql = f"SELECT {select_list(model, 'x')} FROM {model._meta.db_table} x WHERE {where}"
    return fetch_all(model, sql + (" FOR UPDATE" if lock else ""), params)


def fetch_one(model: type[M], where: str, params: Sequence[Any], *, lock: bool = False) -> M | None:
    """The one row of ``model`` matching ``where`` (as :func:`fetch_where`), or None."""
    found = fetch_where(model, where, params, lock=lock)
    return found[0] if found else None


def fetch_all(model: type[M], sql: str, params: Sequence[Any] | dict[str, Any]) -> list[M]:
    """Instances of ``model`` from ``sql``, a constant of the caller's selecting ``select_list(model, …)``.

    The ORM's ``raw()`` does the same but works out its columns and converters again on every call."""
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = []
    for row in rows:
        (instance,) = instances((model,), row)
        assert isinstance(instance, model)
        found.append(instance)
    return found


def instances(models: Sequence[type[Model]], row: Sequence[Any]) -> list[Model]:
    """One instance per model from ``row``, which holds each model's :func:`select_list` in turn."""
    db = connections[DEFAULT_DB_ALIAS]
    built = []
    start = 0
    for model in models:
        names, converters = _shape(model)
        values = list(row[start : start + len(names)])
        for index, functions, column in converters:
            for convert in functions:
                values[index] = convert(values[index], column, db)
        built.append(model.from_db(DEFAULT_DB_ALIAS, names, values))
        start += len(names)
    return built
