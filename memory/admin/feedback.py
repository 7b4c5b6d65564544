"""End users' corrections (rejections) and the subjects recall keeps missing, read-only."""

from __future__ import annotations

from django.contrib import admin

from accounts.admin import AgentFilter, ReadOnlyAdmin
from history.admin import shorten
from memory.models import RecallMiss, Rejection


@admin.register(Rejection)
class RejectionAdmin(ReadOnlyAdmin):
    """Typed corrections and, with relation "bystander", reports filed for review instead (``kind``
    "wrong", ``requested_kind`` what was asked; docs/corrections.md)."""

    list_display = ("id", "kind", "requested_kind", "relation", "revision", "user", "correction_excerpt", "created_at")
    list_filter = (AgentFilter, "kind", "relation")
    list_select_related = ("revision", "user")
    search_fields = ("=revision__id", "user__username")
    show_full_result_count = False

    @admin.display(description="correction")
    def correction_excerpt(self, obj: Rejection) -> str:
        return shorten(obj.correction, 60)


@admin.register(RecallMiss)
class RecallMissAdmin(ReadOnlyAdmin):
    """Subjects whose task recalls keep returning nothing: hints for the formation loop, upserted by
    the trace write."""

    list_display = ("subject", "agent", "count", "last_missed_at")
    list_filter = (AgentFilter,)
    list_select_related = ("agent__tenant", "subject")
    search_fields = ("subject__display_name", "=subject__external_id")
    show_full_result_count = False
