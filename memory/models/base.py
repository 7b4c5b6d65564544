"""What every memory model shares: the constraint tying a text column to its choices, the short id
a model cites a revision by (``m:0000002a``), and how a person's way of naming a memory is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


#: The largest row id (bigint), as ``config.api.MAX_ID``: a larger number names no memory.
MAX_ID = 2**63 - 1

#: Exactly eight hex digits: a short id typed without its ``m:`` (the width ``short_id`` pads to).
BARE_SHORT_ID = re.compile(r"[0-9a-fA-F]{8}")


@dataclass(frozen=True)
class MemoryName:
    """A memory as a person named it: by the id of one of its revisions (the ``m:`` id a citation
    shows, current or not) or, when ``is_revision`` is false, by its entry id."""

    id: int
    is_revision: bool


def parse_memory_name(text: str, *, bare_short_id: bool = True) -> MemoryName | None:
    """The one rule for reading an id a person typed for a memory:

    - ``m:`` and hex digits (``m:0000002a``, also ``[m:0000002a]``) names a revision;
    - so do exactly eight hex digits (``0000002a``), unless ``bare_short_id`` is off: an API path keeps
      reading a plain number as an entry id, whatever its width;
    - otherwise a plain decimal number (``42``) is an entry id.

    So ``00000018`` is revision 0x18, never entry 18. Anything else (words, an id out of bigint range)
    is not a memory's id: None.
    """
    cleaned = text.strip()
    revision_id = parse_short_id(cleaned)
    if revision_id is None and bare_short_id and BARE_SHORT_ID.fullmatch(cleaned):
        revision_id = int(cleaned, 16)
    if revision_id is not None:
        return MemoryName(revision_id, is_revision=True) if 1 <= revision_id <= MAX_ID else None
    if cleaned.isascii() and cleaned.isdigit() and 1 <= int(cleaned) <= MAX_ID:
        return MemoryName(int(cleaned), is_revision=False)
    return None
