"""The audit of the management API's reads, read-only: which API key read which memories, when."""

from __future__ import annotations

from django.contrib import admin

from accounts.admin import AgentFilter, ReadOnlyAdmin, fixed_values_filter
from memory.models import ManagementEndpoint, ManagementReadEvent


@admin.register(ManagementReadEvent)
class ManagementReadEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "agent", "api_key", "endpoint", "entries", "filters")
    fields = ("created_at", "agent", "api_key", "endpoint", "entry_ids", "filters")
    list_filter = (AgentFilter, fixed_values_filter("endpoint", ManagementEndpoint.values))
    list_select_related = ("agent__tenant", "api_key__agent")
    search_fields = ("=id", "=api_key__prefix")
    show_full_result_count = False

    @admin.display(description="entries")
    def entries(self, obj: ManagementReadEvent) -> str:
        return ", ".join(str(entry_id) for entry_id in obj.entry_ids) or "—"
