"""The queue of unresolved conflicts between revisions, resolved through ``conflict_resolve``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from accounts.admin import AgentFilter, ReadOnlyAdmin
from memory.admin.revisions import revision_link
from memory.models import RevisionConflict
from memory.services import conflict_resolve


@admin.register(RevisionConflict)
class RevisionConflictAdmin(ReadOnlyAdmin):
    """The conflict queue: two revisions that contradict each other, shown side by side. Resolving
    stops retrieval from marking them as a pair; which one is true is settled by amending or forgetting."""

    change_form_template = "admin/memory/revisionconflict/change_form.html"
    list_display = ("id", "first", "second", "agent", "created_at", "resolved_at")
    list_filter = (AgentFilter, ("resolved_at", admin.EmptyFieldListFilter))
    list_select_related = ("agent__tenant", "revision_a", "revision_b")
    search_fields = ("=id", "=revision_a__entry__id", "=revision_b__entry__id")
    show_full_result_count = False
    fields = ("agent", "created_at", "resolved_at")
    actions = ("resolve_conflicts",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RevisionConflict]:
        return (
            super()
            .get_queryset(request)
            .select_related(
                "agent__tenant",
                "revision_a__subject",
                "revision_a__entry",
                "revision_b__subject",
                "revision_b__entry",
            )
        )

    object_views = (("resolve", "resolve_view"),)

    def change_form_context(self, request: HttpRequest, obj: RevisionConflict | None) -> dict[str, Any]:
        if obj is None:
            return {}
        return {
            "pair": [obj.revision_a, obj.revision_b],
            "can_resolve": obj.resolved_at is None and self.has_resolve_permission(request),
        }

    @admin.display(description="revision A")
    def first(self, obj: RevisionConflict) -> str:
        return revision_link(obj.revision_a)

    @admin.display(description="revision B")
    def second(self, obj: RevisionConflict) -> str:
        return revision_link(obj.revision_b)

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_revisionconflict"))

    @admin.action(description="Mark selected conflicts resolved", permissions=["resolve"])
    def resolve_conflicts(self, request: HttpRequest, queryset: QuerySet[RevisionConflict]) -> None:
        resolved = 0
        for conflict in queryset.filter(resolved_at__isnull=True).select_related("agent"):
            resolved += conflict_resolve(agent=conflict.agent, conflict_id=conflict.pk).changed
        self.message_user(request, f"Resolved {resolved} conflict(s).", messages.SUCCESS)

    def resolve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def perform(conflict: RevisionConflict) -> tuple[str, int]:
            if conflict_resolve(agent=conflict.agent, conflict_id=conflict.pk).changed:
                return f"Conflict {conflict.pk} resolved.", messages.SUCCESS
            return f"Conflict {conflict.pk} was already resolved.", messages.INFO

        return self.object_action(request, object_id, allowed=self.has_resolve_permission, perform=perform)
