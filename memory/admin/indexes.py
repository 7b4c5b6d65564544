"""The derived semantic indexes: embedding generations, the vectors of revisions and messages (where
pgvector stores them) and the index outbox.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.admin import ReadOnlyAdmin
from history.admin import shorten
from memory.embeddings.index import vectors_stored
from memory.models import EmbeddingGeneration, IndexOutbox, MessageEmbedding, RevisionEmbedding


@admin.register(EmbeddingGeneration)
class EmbeddingGenerationAdmin(ReadOnlyAdmin):
    tenant_path = None
    list_display = ("id", "model_name", "dims", "state", "created_at", "completed_at")
    list_filter = ("state",)


class GenerationFilter(admin.SimpleListFilter):
    """Filter vectors by generation, listed from the small generations table (never a DISTINCT over
    the vectors)."""

    title = "generation"
    parameter_name = "generation"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        generations = EmbeddingGeneration.objects.order_by("-pk")
        return [(str(g.pk), f"{g.pk}: {g.model_name} ({g.state})") for g in generations]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(generation_id=int(value)) if value and value.isdigit() else queryset


class EmbeddingAdmin(ReadOnlyAdmin):
    """Vectors are derived and disposable; the page shows what they belong to, not 384 floats."""

    exclude = ("vector",)
    readonly_fields = ("vector_head",)
    list_filter = (GenerationFilter,)
    show_full_result_count = False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The tables exist only where the server has pgvector (memory/0003); elsewhere there is
        # nothing to show and the pages would fail, so the models are not offered at all.
        return vectors_stored() and super().has_view_permission(request, obj)

    @admin.display(description="vector (first components)")
    def vector_head(self, obj: RevisionEmbedding | MessageEmbedding) -> str:
        head = ", ".join(f"{x:.4f}" for x in list(obj.vector)[:8])
        return f"[{head}, …]"


@admin.register(RevisionEmbedding)
class RevisionEmbeddingAdmin(EmbeddingAdmin):
    tenant_path = "revision__agent__tenant"
    list_display = ("id", "revision_id", "generation_id", "model_name", "dims", "created_at")
    search_fields = ("=revision__id",)


@admin.register(MessageEmbedding)
class MessageEmbeddingAdmin(EmbeddingAdmin):
    tenant_path = "message__agent__tenant"
    list_display = ("id", "message_id", "generation_id", "model_name", "dims", "created_at")
    search_fields = ("=message__id",)


@admin.register(IndexOutbox)
class IndexOutboxAdmin(ReadOnlyAdmin):
    tenant_path = None
    list_display = ("id", "target", "target_id", "created_at", "processed_at", "attempts", "error")
    list_filter = ("target", ("processed_at", admin.EmptyFieldListFilter))
    search_fields = ("=target_id",)
    show_full_result_count = False

    @admin.display(description="last error")
    def error(self, obj: IndexOutbox) -> str:
        return shorten(obj.last_error, 60)
