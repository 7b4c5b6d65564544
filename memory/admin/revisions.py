"""Revisions, their evidence, their full-text sidecar and the ids of deleted revisions: immutable rows,
read-only pages.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from accounts.admin import AgentFilter, ReadOnlyAdmin, ReadOnlyInline, admin_change_url
from history.admin import FULLTEXT_HELP, audience_readers_html, audience_text, fulltext_search, shorten
from memory.models import DeletedRevision, MemoryEvidence, MemoryRevision, RevisionSearchDocument


class EvidenceInline(ReadOnlyInline):
    model = MemoryEvidence
    fk_name = "revision"
    fields = ("kind", "message", "parent_revision", "operator", "audience")
    readonly_fields = ("audience",)
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryEvidence]:
        return super().get_queryset(request).select_related("message", "parent_revision", "operator")

    @admin.display(description="audience")
    def audience(self, obj: MemoryEvidence) -> str:
        return audience_text(obj)


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "entry_id",
        "number",
        "excerpt",
        "subject",
        "belief_type",
        "audience",
        "lifecycle",
        "created_by",
        "recorded_at",
    )
    list_filter = (AgentFilter, "belief_type", "lifecycle", "portability", "audience_kind", "created_by")
    list_select_related = ("subject",)
    search_fields = ("body",)
    search_help_text = FULLTEXT_HELP
    show_full_result_count = False
    readonly_fields = ("audience", "readers")
    inlines = (EvidenceInline,)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MemoryRevision], search_term: str
    ) -> tuple[QuerySet[MemoryRevision], bool]:
        return fulltext_search(request, queryset, search_term, "search_document"), False

    @admin.display(description="body")
    def excerpt(self, obj: MemoryRevision) -> str:
        return shorten(obj.body)

    @admin.display(description="source audience", ordering="audience_kind")
    def audience(self, obj: MemoryRevision) -> str:
        return audience_text(obj)

    @admin.display(description="readers")
    def readers(self, obj: MemoryRevision) -> str:
        return audience_readers_html(obj)


@admin.register(RevisionSearchDocument)
class RevisionSearchDocumentAdmin(ReadOnlyAdmin):
    tenant_path = "revision__agent__tenant"
    list_display = ("revision", "agent_id", "terms")
    list_select_related = ("revision",)
    search_fields = ("=revision__id",)
    show_full_result_count = False

    @admin.display(description="tsvector")
    def terms(self, obj: RevisionSearchDocument) -> str:
        return shorten(str(obj.tsv))


@admin.register(MemoryEvidence)
class MemoryEvidenceAdmin(ReadOnlyAdmin):
    tenant_path = "revision__agent__tenant"
    list_display = ("id", "revision_id", "kind", "message_id", "parent_revision_id", "audience", "created_at")
    list_filter = ("kind", "audience_kind")
    search_fields = ("=revision__id", "=message__id")
    show_full_result_count = False
    readonly_fields = ("audience",)

    @admin.display(description="audience", ordering="audience_kind")
    def audience(self, obj: MemoryEvidence) -> str:
        return audience_text(obj)


def revision_link(revision: MemoryRevision | None) -> str:
    if revision is None:
        return "—"
    return format_html(
        '<a href="{}">{}</a> r{} {}',
        admin_change_url(revision),
        revision.short_id,
        revision.number,
        shorten(revision.body, 70),
    )


@admin.register(DeletedRevision)
class DeletedRevisionAdmin(ReadOnlyAdmin):
    """Revisions deleted with a conversation on request: replies built on one are judged revision by
    revision from then on (written by the revisions' ``record_deletion`` trigger)."""

    list_display = ("revision_id", "agent", "deleted_at")
    list_filter = (AgentFilter,)
    list_select_related = ("agent__tenant",)
    search_fields = ("=revision_id",)
    show_full_result_count = False
