"""What recall and turns leave behind, read-only: recall traces with their items, the operator's
retrieval events and the committed ledger.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from accounts.admin import AgentFilter, ReadOnlyAdmin, ReadOnlyInline, admin_change_url, fixed_values_filter
from history.admin import audience_text, shorten
from memory.models import MemoryEntry, MemoryOperation, RecallTrace, RecallTraceItem, RetrievalEvent, short_id


class TraceItemInline(ReadOnlyInline):
    """The trace's items in rendered order, with the labels they were shown with."""

    model = RecallTraceItem
    fk_name = "trace"
    ordering = ("position",)
    fields = (
        "position",
        "item",
        "statement",
        "subject_label",
        "band",
        "score",
        "reason",
        "scores",
        "carried",
        "blocked_reason",
        "conflict_ids",
    )
    verbose_name_plural = "items, in rendered order"

    def get_queryset(self, request: HttpRequest) -> QuerySet[RecallTraceItem]:
        return super().get_queryset(request).select_related("revision")

    @admin.display(description="id")
    def item(self, obj: RecallTraceItem) -> str:
        url = admin_change_url(obj.entry_id, model=MemoryEntry)
        return format_html('<a href="{}">{}</a>', url, short_id(obj.revision_id))

    @admin.display(description="statement")
    def statement(self, obj: RecallTraceItem) -> str:
        # A withheld item's text never reached the model; the operator opens the revision to read it.
        return f"[BLOCKED: {obj.blocked_reason}]" if obj.blocked_reason else shorten(obj.revision.body, 160)

    @admin.display(description="components")
    def scores(self, obj: RecallTraceItem) -> str:
        return components_text(obj.components)

    @admin.display(description="conflicts")
    def conflict_ids(self, obj: RecallTraceItem) -> str:
        return ", ".join(short_id(c) for c in obj.conflicts) or "—"


def components_text(components: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in sorted(components.items())) or "—"


def rendered_html(text: str) -> str:
    return format_html('<pre class="engram-rendered">{}</pre>', text) if text else "—"


@admin.register(RecallTrace)
class RecallTraceAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "agent",
        "moment",
        "profile",
        "returned_count",
        "blocked_count",
        "degradation",
        "audience",
        "created_at",
    )
    list_filter = (
        AgentFilter,
        "moment",
        fixed_values_filter("profile", ["core", "task"]),
        ("degradation", admin.EmptyFieldListFilter),
    )
    list_select_related = ("agent__tenant",)
    search_fields = ("=id", "=rendered_sha256")
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("agent", "moment", "profile", "policy_version", "session", "turn", "created_at")}),
        ("What was rendered", {"fields": ("audience", "as_of", "historical", "rendered", "rendered_sha256")}),
        (
            "Counts",
            {
                "fields": (
                    "token_estimate",
                    "considered_count",
                    "returned_count",
                    "blocked_count",
                    "withheld_unknown_count",
                    "degradation",
                )
            },
        ),
        (
            "Operator-only (cleared by retention)",
            {"fields": ("query_text", "arms", "candidate_ids", "dropped_ids", "operator_fields_cleared_at")},
        ),
    )
    readonly_fields = ("audience", "rendered")
    inlines = (TraceItemInline,)

    @admin.display(description="ceiling", ordering="audience_kind")
    def audience(self, obj: RecallTrace) -> str:
        return audience_text(obj)

    @admin.display(description="rendered block (exact bytes)")
    def rendered(self, obj: RecallTrace) -> str:
        return rendered_html(obj.rendered_text)


@admin.register(RecallTraceItem)
class RecallTraceItemAdmin(ReadOnlyAdmin):
    tenant_path = "trace__agent__tenant"
    list_display = ("trace_id", "position", "revision", "band", "score", "reason", "carried", "blocked_reason")
    list_filter = (
        fixed_values_filter("band", ["high", "medium", "low"]),
        "carried",
        ("blocked_reason", admin.EmptyFieldListFilter),
    )
    list_select_related = ("revision",)
    search_fields = ("=trace__id", "=revision__id")
    show_full_result_count = False


@admin.register(RetrievalEvent)
class RetrievalEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "trace_link", "selected", "cost_tokens", "degradation", "created_at")
    list_filter = (AgentFilter, ("degradation", admin.EmptyFieldListFilter))
    list_select_related = ("agent__tenant",)
    search_fields = ("=id", "=query_digest")
    show_full_result_count = False

    @admin.display(description="trace", ordering="trace_id")
    def trace_link(self, obj: RetrievalEvent) -> str:
        if obj.trace_id is None:
            return "—"
        return format_html('<a href="{}">{}</a>', admin_change_url(obj.trace_id, model=RecallTrace), obj.trace_id)

    @admin.display(description="selected")
    def selected(self, obj: RetrievalEvent) -> str:
        return ", ".join(short_id(r) for r in obj.selected_revision_ids) or "—"


@admin.register(MemoryOperation)
class MemoryOperationAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "entry_id", "revision_number", "turn_id", "round", "subject_changed", "created_at")
    list_filter = (AgentFilter, "kind")
    search_fields = ("=entry__id", "=turn__id")
    show_full_result_count = False
