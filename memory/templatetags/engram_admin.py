"""Template helpers of the operator admin: a revision id as people see it."""

from __future__ import annotations

from django import template

from memory.models import short_id

register = template.Library()


@register.filter(name="short_id")
def short_id_filter(revision_id: int | None) -> str:
    return short_id(revision_id) if revision_id else "—"
