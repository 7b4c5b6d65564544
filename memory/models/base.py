"""What every memory model shares: the constraint tying a text column to its choices, and the short id
a model cites a revision by (``m:0000002a``).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def choices_constraint(name: str, field: str, choices: type[models.TextChoices]) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


def short_id(revision_id: int) -> str:
    return f"m:{revision_id:08x}"


def parse_short_id(text: str) -> int | None:
    """The revision id of ``m:0000002a`` (with or without brackets), or None if it is not one."""
    cleaned = text.strip().strip("[]")
    if not cleaned.startswith("m:"):
        return None
    try:
        return int(cleaned[2:], 16)
    except ValueError:
        return None
