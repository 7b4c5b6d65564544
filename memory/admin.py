"""Operator admin for memories: entries with their revision history, evidence, sharing, indexes,
traces and the committed ledger.

Revisions, evidence, ledger rows, traces and audit events are immutable, so their pages are read-only.
An entry is never edited in place: forgetting goes through ``entry_forget``, like every other write.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.admin import AgentFilter, ReadOnlyAdmin, ReadOnlyInline
from config.errors import ServiceError
from history.admin import FULLTEXT_HELP, audience_readers_html, audience_text, fulltext_search, shorten
from memory.models import (
    EmbeddingGeneration,
    IndexOutbox,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    MessageEmbedding,
    RecallMiss,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    RevisionConflict,
    RevisionEmbedding,
    RevisionSearchDocument,
    SharingGrant,
    SharingRequest,
    SharingState,
)
from memory.services import entry_forget
from memory.sharing import grant_revoke, sharing_request_review


class RevisionInline(ReadOnlyInline):
    """Every revision of an entry, newest first."""

    model = MemoryRevision
    fk_name = "entry"
    ordering = ("-number",)
    fields = ("number", "body", "subject", "belief_type", "audience", "lifecycle", "created_by", "recorded_at")
    readonly_fields = ("audience",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryRevision]:
        return super().get_queryset(request).select_related("subject")

    @admin.display(description="source audience")
    def audience(self, obj: MemoryRevision) -> str:
        return audience_text(obj)


@admin.register(MemoryEntry)
class MemoryEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "statement",
        "subject",
        "belief_type",
        "audience",
        "status",
        "flagged_for_review",
        "agent",
        "created_at",
    )
    list_filter = (
        AgentFilter,
        "status",
        "flagged_for_review",
        "current_revision__belief_type",
        "current_revision__audience_kind",
        "current_revision__portability",
    )
    list_select_related = ("agent__tenant", "current_revision__subject")
    search_fields = ("current_revision__body",)
    search_help_text = FULLTEXT_HELP
    show_full_result_count = False
    fields = (
        "agent",
        "status",
        "statement",
        "subject",
        "belief_type",
        "audience",
        "readers",
        "current_revision",
        "flagged_for_review",
        "utility",
        "last_used_at",
        "created_at",
        "forgotten_at",
    )
    readonly_fields = ("statement", "subject", "belief_type", "audience", "readers")
    inlines = (RevisionInline,)
    actions = ("forget_entries",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryEntry]:
        return super().get_queryset(request).select_related("agent__tenant", "current_revision__subject")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MemoryEntry], search_term: str
    ) -> tuple[QuerySet[MemoryEntry], bool]:
        return fulltext_search(queryset, search_term, "current_revision__search_document__tsv"), False

    @admin.display(description="statement (current revision)")
    def statement(self, obj: MemoryEntry) -> str:
        return shorten(obj.current_revision.body, 120) if obj.current_revision else "—"

    @admin.display(description="subject")
    def subject(self, obj: MemoryEntry) -> str:
        revision = obj.current_revision
        if revision is None or revision.subject is None:
            return "—"
        return revision.subject.label

    @admin.display(description="belief type", ordering="current_revision__belief_type")
    def belief_type(self, obj: MemoryEntry) -> str:
        return obj.current_revision.get_belief_type_display() if obj.current_revision else "—"

    @admin.display(description="source audience", ordering="current_revision__audience_kind")
    def audience(self, obj: MemoryEntry) -> str:
        return audience_text(obj.current_revision) if obj.current_revision else "—"

    @admin.display(description="readers")
    def readers(self, obj: MemoryEntry) -> str:
        return audience_readers_html(obj.current_revision) if obj.current_revision else "—"

    @admin.action(description="Forget selected memories", permissions=["forget"])
    def forget_entries(self, request: HttpRequest, queryset: QuerySet[MemoryEntry]) -> None:
        forgotten = unchanged = 0
        for entry in queryset.select_related("agent"):
            try:
                result = entry_forget(agent=entry.agent, entry_id=entry.pk)
            except ServiceError as error:
                self.message_user(request, f"m:{entry.pk}: {error.message}", messages.ERROR)
                continue
            if result.changed:
                forgotten += 1
            else:
                unchanged += 1
        self.message_user(request, f"Forgot {forgotten} memory(ies); {unchanged} already forgotten.", messages.SUCCESS)

    def has_forget_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_memoryentry"))


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
        return fulltext_search(queryset, search_term, "search_document__tsv"), False

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


@admin.register(RevisionConflict)
class RevisionConflictAdmin(ReadOnlyAdmin):
    list_display = ("id", "revision_a", "revision_b", "created_at", "resolved_at")
    list_filter = (AgentFilter, ("resolved_at", admin.EmptyFieldListFilter))
    list_select_related = ("revision_a", "revision_b")


@admin.register(SharingRequest)
class SharingRequestAdmin(ReadOnlyAdmin):
    """Operators review pending requests; approving creates a grant through the sharing service."""

    list_display = ("id", "revision", "audience", "confirmer", "state", "created_at", "decided_at")
    list_filter = (AgentFilter, "state")
    list_select_related = ("revision", "confirmer")
    readonly_fields = ("audience",)
    actions = ("approve_requests", "deny_requests")

    def _decide(self, request: HttpRequest, queryset: QuerySet[SharingRequest], *, approve: bool) -> None:
        decided = 0
        for pending in queryset.filter(state=SharingState.PENDING):
            try:
                sharing_request_review(request_id=pending.pk, operator=request.user, approve=approve)  # type: ignore[arg-type]
            except ServiceError as error:
                self.message_user(request, f"Request {pending.pk}: {error.message}", messages.ERROR)
                continue
            decided += 1
        verb = "Approved" if approve else "Denied"
        self.message_user(request, f"{verb} {decided} request(s).", messages.SUCCESS)

    @admin.action(description="Approve selected requests (creates grants)", permissions=["review"])
    def approve_requests(self, request: HttpRequest, queryset: QuerySet[SharingRequest]) -> None:
        self._decide(request, queryset, approve=True)

    @admin.action(description="Deny selected requests", permissions=["review"])
    def deny_requests(self, request: HttpRequest, queryset: QuerySet[SharingRequest]) -> None:
        self._decide(request, queryset, approve=False)

    def has_review_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_sharingrequest"))

    @admin.display(description="to audience", ordering="audience_kind")
    def audience(self, obj: SharingRequest) -> str:
        return audience_text(obj)


@admin.register(SharingGrant)
class SharingGrantAdmin(ReadOnlyAdmin):
    """Grants are created only by decisions and only ever revoked; revocation applies on the next read."""

    list_display = ("id", "revision", "audience", "granted_by_actor", "granted_by_user", "created_at", "revoked_at")
    list_filter = (AgentFilter, ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("revision", "granted_by_actor", "granted_by_user")
    readonly_fields = ("audience",)
    actions = ("revoke_grants",)

    @admin.action(description="Revoke selected grants", permissions=["revoke"])
    def revoke_grants(self, request: HttpRequest, queryset: QuerySet[SharingGrant]) -> None:
        revoked = 0
        for grant in queryset.filter(revoked_at__isnull=True):
            grant_revoke(grant_id=grant.pk, user=request.user)  # type: ignore[arg-type]
            revoked += 1
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_sharinggrant"))

    @admin.display(description="to audience", ordering="audience_kind")
    def audience(self, obj: SharingGrant) -> str:
        return audience_text(obj)


@admin.register(EmbeddingGeneration)
class EmbeddingGenerationAdmin(ReadOnlyAdmin):
    tenant_path = None
    list_display = ("id", "model_name", "dims", "state", "created_at", "completed_at")
    list_filter = ("state",)


class EmbeddingAdmin(ReadOnlyAdmin):
    """Vectors are derived and disposable; the page shows what they belong to, not 384 floats."""

    exclude = ("vector",)
    readonly_fields = ("vector_head",)
    list_filter = ("model_name",)
    show_full_result_count = False

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


class TraceItemInline(ReadOnlyInline):
    model = RecallTraceItem
    fk_name = "trace"
    ordering = ("position",)
    fields = ("position", "revision", "band", "score", "reason", "carried", "blocked_reason", "conflicts")

    def get_queryset(self, request: HttpRequest) -> QuerySet[RecallTraceItem]:
        return super().get_queryset(request).select_related("revision")


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
    list_filter = (AgentFilter, "moment", "profile", "degradation")
    list_select_related = ("agent__tenant",)
    search_fields = ("=id", "=rendered_sha256")
    show_full_result_count = False
    readonly_fields = ("audience",)
    inlines = (TraceItemInline,)

    @admin.display(description="ceiling", ordering="audience_kind")
    def audience(self, obj: RecallTrace) -> str:
        return audience_text(obj)


@admin.register(RecallTraceItem)
class RecallTraceItemAdmin(ReadOnlyAdmin):
    tenant_path = "trace__agent__tenant"
    list_display = ("trace_id", "position", "revision", "band", "score", "reason", "carried", "blocked_reason")
    list_filter = ("band", "carried", "blocked_reason")
    list_select_related = ("revision",)
    search_fields = ("=trace__id", "=revision__id")
    show_full_result_count = False


@admin.register(RecallMiss)
class RecallMissAdmin(ReadOnlyAdmin):
    """Subjects whose task recalls keep returning nothing: hints for what the agent should have learned."""

    list_display = ("subject", "agent", "count", "last_missed_at")
    list_filter = (AgentFilter,)
    list_select_related = ("subject", "agent")
    ordering = ("-count", "-last_missed_at")


@admin.register(RetrievalEvent)
class RetrievalEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "trace_id", "selected_revision_ids", "cost_tokens", "degradation", "created_at")
    list_filter = (AgentFilter, "degradation")
    list_select_related = ("agent__tenant",)
    search_fields = ("=id", "=query_digest")
    show_full_result_count = False


@admin.register(MemoryOperation)
class MemoryOperationAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "entry_id", "revision_number", "turn_id", "round", "subject_changed", "created_at")
    list_filter = (AgentFilter, "kind")
    search_fields = ("=entry__id", "=turn__id")
    show_full_result_count = False


@admin.register(Rejection)
class RejectionAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "revision", "user", "correction_excerpt", "created_at")
    list_filter = (AgentFilter, "kind")
    list_select_related = ("revision", "user")
    search_fields = ("=revision__id", "user__username")
    show_full_result_count = False

    @admin.display(description="correction")
    def correction_excerpt(self, obj: Rejection) -> str:
        return shorten(obj.correction, 60)
