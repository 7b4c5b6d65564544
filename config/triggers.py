"""Trigger builders shared by the apps' models."""

from __future__ import annotations

import pgtrigger


def must_hold(
    name: str,
    check: str,
    message: str,
    *,
    operation: pgtrigger.Operation | None = None,
    condition: pgtrigger.Condition | None = None,
) -> pgtrigger.Trigger:
    """A BEFORE trigger refusing any row for which the SQL expression ``check`` (over ``NEW``) is false.

    Used where a consistency rule spans tables (a denormalised perspective column, a pointer that must
    stay inside its own entry), which a CHECK constraint cannot express. It raises SQLSTATE 23514
    (check_violation), so Django reports an ``IntegrityError`` like any other constraint. ``condition``
    limits an UPDATE trigger to the updates that change what ``check`` reads.
    """
    return pgtrigger.Trigger(
        name=name,
        when=pgtrigger.Before,
        operation=operation or (pgtrigger.Insert | pgtrigger.Update),
        condition=condition,
        func=f"IF NOT ({check}) THEN RAISE EXCEPTION '{message}' USING ERRCODE = 'check_violation'; END IF;"
        " RETURN NEW;",
    )
