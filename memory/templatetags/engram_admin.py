"""Template helpers of the operator admin: a revision id as people see it, and the review queues with
how many rows wait in each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template
from django.contrib import admin
from django.db.models import Model, Q
from django.urls import reverse

from memory.models import EntryStatus, MemoryEntry, RevisionConflict, SharingRequest, SharingState, short_id

register = template.Library()


@register.filter(name="short_id")
def short_id_filter(revision_id: int | None) -> str:
    return short_id(revision_id) if revision_id else "—"


@dataclass(frozen=True)
class ReviewQueue:
    title: str
    description: str
    model: type[Model]
    #: The changelist filter that opens the queue (the same rows ``waiting`` counts).
    query: str
    waiting: Q


QUEUES = (
    ReviewQueue(
        "Flagged memories",
        "entries end users marked \u201csomething\u2019s wrong\u201d",
        MemoryEntry,
        "flagged_for_review__exact=1&status__exact=live",
        Q(flagged_for_review=True, status=EntryStatus.LIVE),
    ),
    ReviewQueue(
        "Unresolved conflicts",
        "contradicting revisions recall returns side by side",
        RevisionConflict,
        "resolved_at__isempty=1",
        Q(resolved_at__isnull=True),
    ),
    ReviewQueue(
        "Pending sharing requests",
        "memories an agent asked to release to a wider audience",
        SharingRequest,
        "state__exact=pending",
        Q(state=SharingState.PENDING),
    ),
)


@register.simple_tag(takes_context=True)
def review_queues(context: dict[str, Any]) -> list[dict[str, Any]]:
    """The queues the operator may view, each with its link and how many rows wait in it, counted in
    the rows the operator's own list would show (their tenants only)."""
    request = context["request"]
    shown = []
    for queue in QUEUES:
        model_admin = admin.site.get_model_admin(queue.model)
        if not model_admin.has_view_permission(request):
            continue
        opts = queue.model._meta
        shown.append(
            {
                "id": f"queue-{opts.model_name}",
                "title": queue.title,
                "description": queue.description,
                "url": f"{reverse(f'admin:{opts.app_label}_{opts.model_name}_changelist')}?{queue.query}",
                "count": model_admin.get_queryset(request).filter(queue.waiting).count(),
            }
        )
    return shown
