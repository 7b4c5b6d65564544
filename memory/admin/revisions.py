"""Revisions, their evidence, their full-text sidecar and the ids of deleted revisions: immutable rows,
read-only pages.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounts.admin import AgentFilter, ReadOnlyAdmin, ReadOnlyInline, admin_change_url, isolated, isolated_text
from history.admin import audience_readers_html, audience_text, shorten
from memory.admin.ids import MEMORY_SEARCH_HELP, search_revisions
from memory.models import DeletedRevision, MemoryEntry, MemoryEvidence, MemoryRevision, RevisionSearchDocument


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
    change_list_template = "admin/memory/memoryrevision/change_list.html"
    list_display = (
        "revision",
        "entry_link",
        "number",
        "excerpt",
        "about",
        "belief_type",
        "audience",
        "lifecycle",
        "created_by",
        "recorded_at",
    )
    list_filter = (AgentFilter, "belief_type", "lifecycle", "portability", "audience_kind", "created_by")
    list_select_related = ("subject",)
    search_fields = ("body",)
    search_help_text = MEMORY_SEARCH_HELP
    show_full_result_count = False
    readonly_fields = ("revision", "statement", "audience", "readers")
    inlines = (EvidenceInline,)

    def get_fields(self, request: HttpRequest, obj: MemoryRevision | None = None) -> list[Any]:
        # Its m: id first: the id citations, recall and the API name this revision by; the body
        # isolated in place of the raw field.
        fields = [f for f in super().get_fields(request, obj) if f not in ("revision", "statement")]
        return ["revision", *("statement" if f == "body" else f for f in fields)]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MemoryRevision], search_term: str
    ) -> tuple[QuerySet[MemoryRevision], bool]:
        return search_revisions(request, queryset, search_term)

    @admin.display(description="revision", ordering="id")
    def revision(self, obj: MemoryRevision) -> str:
        return obj.short_id

    @admin.display(description="entry", ordering="entry_id")
    def entry_link(self, obj: MemoryRevision) -> str:
        return format_html('<a href="{}">{}</a>', admin_change_url(obj.entry_id, model=MemoryEntry), obj.entry_id)

    @admin.display(description="body")
    def statement(self, obj: MemoryRevision) -> SafeString:
        return isolated_text(obj.body)

    @admin.display(description="body")
    def excerpt(self, obj: MemoryRevision) -> SafeString:
        return isolated(shorten(obj.body))

    @admin.display(description="subject", ordering="subject")
    def about(self, obj: MemoryRevision) -> SafeString | str:
        return isolated(obj.subject.label) if obj.subject is not None else "—"

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
        '<a href="{}">{}</a> r{} <bdi>{}</bdi>',
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
