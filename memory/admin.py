"""Operator admin for memories: entries with their revision history, evidence, sharing, indexes,
traces and the committed ledger, and the review queues (flagged entries, unresolved conflicts,
pending sharing requests).

Revisions, evidence, ledger rows, traces and audit events are immutable, so their pages are read-only.
An entry is never edited in place: "Amend this memory" writes revision N+1 through ``revision_amend``
with the operator as provenance; forgetting, clearing a review flag, resolving a conflict, deciding a
sharing request and revoking a grant each go through their service, like every other write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.widgets import AdminSplitDateTime, ForeignKeyRawIdWidget
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html

from accounts.admin import (
    ActorAdmin,
    AgentFilter,
    ReadOnlyAdmin,
    ReadOnlyInline,
    admin_change_url,
    fixed_values_filter,
)
from accounts.models import Actor
from config.errors import Conflict, ServiceError
from history.admin import FULLTEXT_HELP, audience_readers_html, audience_text, fulltext_search, shorten
from memory.embeddings.index import vectors_stored
from memory.erasure import erasure_plan, person_actors, person_erase, person_seeds
from memory.export import person_export_for_operator
from memory.models import (
    BeliefType,
    DeletedRevision,
    EmbeddingGeneration,
    EntryStatus,
    ErasureEvent,
    IndexOutbox,
    MemoryEntry,
    MemoryEvidence,
    MemoryOperation,
    MemoryRevision,
    MessageEmbedding,
    Portability,
    RecallMiss,
    RecallTrace,
    RecallTraceItem,
    Rejection,
    RetrievalEvent,
    RevisionConflict,
    RevisionEmbedding,
    RevisionOrigin,
    RevisionSearchDocument,
    SharingGrant,
    SharingRequest,
    SharingState,
    short_id,
)
from memory.previews import ConversationPreviewAdmin, TurnPreviewAdmin  # noqa: F401 (registers them)
from memory.services import (
    KEEP,
    Provenance,
    conflict_resolve,
    entry_forget,
    entry_review_clear,
    revision_amend,
)
from memory.sharing import grant_revoke, sharing_request_review

#: How many ledger operations and trace appearances an entry's page lists (newest first).
RECENT_OPERATIONS = 50
RECENT_TRACES = 20


# --------------------------------------------------------------------------------------------------
# entries: the inspector page, amend, forget, the review-flag queue
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryInspection:
    """Everything the entry page shows below the entry, each list loaded in one query."""

    revisions: list[MemoryRevision]
    grants: list[SharingGrant]
    requests: list[SharingRequest]
    operations: list[MemoryOperation]
    appearances: list[RecallTraceItem]
    #: Typed corrections and bystanders' reports (filed for review) of any revision, newest first.
    rejections: list[Rejection]


def entry_inspection(entry: MemoryEntry) -> EntryInspection:
    """The revision history (newest first, each with its evidence and source messages), grants and
    sharing requests of any revision, the latest ledger operations and the latest trace appearances."""
    evidence = MemoryEvidence.objects.select_related("message__actor", "operator", "actor").order_by("pk")
    revisions = list(
        MemoryRevision.objects.filter(entry=entry)
        .select_related("subject", "source_actor", "created_by_user", "restricted_to_conversation")
        .prefetch_related(Prefetch("evidence", queryset=evidence))
        .order_by("-number")
    )
    grants = list(
        SharingGrant.objects.filter(revision__entry=entry)
        .select_related("revision", "conversation", "granted_by_actor", "granted_by_user")
        .order_by("-pk")
    )
    requests = list(
        SharingRequest.objects.filter(revision__entry=entry)
        .select_related("revision", "conversation", "confirmer", "decided_by_user")
        .order_by("-pk")
    )
    operations = list(
        MemoryOperation.objects.filter(entry=entry).select_related("revision").order_by("-pk")[:RECENT_OPERATIONS]
    )
    appearances = list(
        RecallTraceItem.objects.filter(entry=entry)
        .select_related("trace", "revision")
        .order_by("-trace_id")[:RECENT_TRACES]
    )
    rejections = list(
        Rejection.objects.filter(revision__entry=entry)
        .select_related("revision", "resulting_revision", "user")
        .order_by("-pk")[:RECENT_OPERATIONS]
    )
    return EntryInspection(revisions, grants, requests, operations, appearances, rejections)


def _to_the_second(moment: datetime | None) -> datetime | None:
    return moment.replace(microsecond=0) if moment is not None else None


class AmendForm(forms.Form):
    """An operator's amendment: the fields of a belief an operator may restate. Initial values are
    the current revision's; only the fields that differ from it are passed to ``revision_amend``."""

    expected_revision = forms.IntegerField(widget=forms.HiddenInput)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 90}), strip=True)
    subject = forms.ModelChoiceField(queryset=Actor.objects.none(), required=False, help_text="Empty: not resolved.")
    belief_type = forms.ChoiceField(choices=BeliefType.choices)
    portability = forms.ChoiceField(choices=Portability.choices)
    confidence = forms.FloatField(min_value=0, max_value=1)
    salience = forms.FloatField(min_value=0, max_value=1)
    always_on = forms.BooleanField(required=False, label="Always on")
    valid_from = forms.SplitDateTimeField(widget=AdminSplitDateTime, label="Valid from")
    valid_to = forms.SplitDateTimeField(widget=AdminSplitDateTime, required=False, label="Valid to")

    def __init__(self, *args: Any, entry: MemoryEntry, admin_site: admin.AdminSite, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        subject = self.fields["subject"]
        assert isinstance(subject, forms.ModelChoiceField)
        # The agent's own people only: a subject is never a person of another agent or tenant.
        subject.queryset = Actor.objects.filter(connector__agent_id=entry.agent_id)
        subject.widget = ForeignKeyRawIdWidget(MemoryRevision._meta.get_field("subject").remote_field, admin_site)

    @staticmethod
    def initial_for(revision: MemoryRevision) -> dict[str, Any]:
        return {
            "expected_revision": revision.pk,
            "body": revision.body,
            "subject": revision.subject_id,
            "belief_type": revision.belief_type,
            "portability": revision.portability,
            "confidence": revision.confidence,
            "salience": revision.salience,
            "always_on": revision.always_on,
            "valid_from": revision.valid_from,
            "valid_to": revision.valid_to,
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        valid_from, valid_to = cleaned.get("valid_from"), cleaned.get("valid_to")
        if valid_from and valid_to and valid_to <= valid_from:
            self.add_error("valid_to", "Must be after “valid from”.")
        return cleaned

    def amendment(self, current: MemoryRevision) -> dict[str, Any]:
        """``revision_amend`` keyword arguments for what the operator changed relative to ``current``."""
        data = self.cleaned_data
        subject = data["subject"]
        changes: dict[str, Any] = {
            name: data[name]
            for name in ("belief_type", "portability", "confidence", "salience", "always_on")
            if data[name] != getattr(current, name)
        }
        # The form shows times to the second: an untouched time keeps the revision's exact value.
        for name in ("valid_from", "valid_to"):
            if _to_the_second(data[name]) != _to_the_second(getattr(current, name)):
                changes[name] = data[name]
        subject_id = subject.pk if subject is not None else None
        return {
            "body": data["body"] if data["body"] != current.body else None,
            "subject_id": subject_id if subject_id != current.subject_id else KEEP,
            "changes": changes,
        }


@admin.register(MemoryEntry)
class MemoryEntryAdmin(ReadOnlyAdmin):
    """An entry and, below it, its whole history. Writes go through services only."""

    change_form_template = "admin/memory/memoryentry/change_form.html"
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
    actions = ("forget_entries", "clear_review_flags")

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryEntry]:
        return super().get_queryset(request).select_related("agent__tenant", "current_revision__subject")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MemoryEntry], search_term: str
    ) -> tuple[QuerySet[MemoryEntry], bool]:
        return fulltext_search(request, queryset, search_term, "current_revision__search_document"), False

    object_views = (("amend", "amend_view"), ("forget", "forget_view"), ("clear-flag", "clear_flag_view"))

    def change_form_context(self, request: HttpRequest, obj: MemoryEntry | None) -> dict[str, Any]:
        if obj is None:
            return {}
        live_and_allowed = obj.status == EntryStatus.LIVE and self.has_forget_permission(request)
        return {
            "inspection": entry_inspection(obj),
            "can_amend": live_and_allowed,
            "can_forget": live_and_allowed,
            "can_clear_flag": obj.flagged_for_review and self.has_forget_permission(request),
            "can_revoke": request.user.has_perm("memory.change_sharinggrant"),
            "can_review": request.user.has_perm("memory.change_sharingrequest"),
        }

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

    # --- writes --------------------------------------------------------------------------------

    def has_forget_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_memoryentry"))

    def has_review_permission(self, request: HttpRequest) -> bool:
        return self.has_forget_permission(request)

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

    @admin.action(description="Clear the review flag of selected memories", permissions=["review"])
    def clear_review_flags(self, request: HttpRequest, queryset: QuerySet[MemoryEntry]) -> None:
        cleared = 0
        for entry in queryset.filter(flagged_for_review=True).select_related("agent"):
            cleared += entry_review_clear(agent=entry.agent, entry_id=entry.pk).changed
        self.message_user(request, f"Cleared the review flag of {cleared} memory(ies).", messages.SUCCESS)

    def forget_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def perform(entry: MemoryEntry) -> tuple[str, int]:
            result = entry_forget(agent=entry.agent, entry_id=entry.pk)
            if result.changed:
                return f"Forgot m:{entry.pk}: it no longer appears in any recall.", messages.SUCCESS
            return f"m:{entry.pk} was already forgotten.", messages.INFO

        return self.object_action(request, object_id, allowed=self.has_forget_permission, perform=perform)

    def clear_flag_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def perform(entry: MemoryEntry) -> tuple[str, int]:
            result = entry_review_clear(agent=entry.agent, entry_id=entry.pk)
            if result.changed:
                return f"Cleared the review flag of m:{entry.pk}.", messages.SUCCESS
            return f"m:{entry.pk} was not flagged.", messages.INFO

        return self.object_action(request, object_id, allowed=self.has_review_permission, perform=perform)

    def amend_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the amend form, filled with the current revision. POST: ``revision_amend`` with the
        operator as provenance (the current revision's audience), ``created_by`` operator edit.

        A stale form (someone amended the entry meanwhile) writes nothing: the page shows the new
        current revision beside the operator's kept input, expecting that revision next time.
        """
        if not self.has_forget_permission(request):
            raise PermissionDenied
        entry = self.scoped_object_or_none(request, object_id)
        if entry is None:
            return self.missing_redirect(request, object_id)
        current = entry.current_revision
        if entry.status != EntryStatus.LIVE or current is None:
            self.message_user(request, f"m:{entry.pk} is forgotten: it cannot be amended.", messages.ERROR)
            return HttpResponseRedirect(self.change_url(entry))
        form = AmendForm(
            request.POST if request.method == "POST" else None,
            initial=AmendForm.initial_for(current),
            entry=entry,
            admin_site=self.admin_site,
        )
        conflict = False
        if request.method == "POST" and form.is_valid():
            try:
                result = revision_amend(
                    agent=entry.agent,
                    entry_id=entry.pk,
                    expected_revision_id=form.cleaned_data["expected_revision"],
                    provenance=Provenance(operator=request.user, operator_audience=current.audience),  # type: ignore[arg-type]
                    created_by=RevisionOrigin.OPERATOR_EDIT,
                    **form.amendment(current),
                )
            except Conflict as error:
                conflict = error.code == "stale_revision"
                self.message_user(
                    request,
                    f"{error.message}. Someone amended this memory after you opened the form: nothing was "
                    f"written. Compare with revision {current.number} below, then save again to amend it."
                    if conflict
                    else error.message,
                    messages.ERROR,
                )
                if conflict:
                    # Keep the operator's input; the next save expects the revision now shown.
                    data = request.POST.copy()
                    data["expected_revision"] = str(current.pk)
                    form = AmendForm(data, entry=entry, admin_site=self.admin_site)
            except ServiceError as error:
                self.message_user(request, error.message, messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"Amended m:{entry.pk}: revision {result.revision.number} ({result.revision.short_id}) "
                    "is now current.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(self.change_url(entry))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Amend memory m:{entry.pk}",
            "subtitle": None,
            "original": entry,
            "current": current,
            "form": form,
            "conflict": conflict,
            "media": self.media + form.media,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/memory/memoryentry/amend.html", context)


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


@admin.register(SharingRequest)
class SharingRequestAdmin(ReadOnlyAdmin):
    """Operators review pending requests; approving creates a grant through the sharing service."""

    change_form_template = "admin/memory/sharingrequest/change_form.html"
    list_display = ("id", "revision_excerpt", "audience", "conversation", "confirmer", "state", "created_at")
    list_filter = (AgentFilter, "state")
    list_select_related = ("revision", "confirmer", "conversation")
    search_fields = ("=id", "=revision__entry__id")
    show_full_result_count = False
    readonly_fields = ("audience",)
    actions = ("approve_requests", "deny_requests")

    object_views = (("decide", "decide_view"),)

    def change_form_context(self, request: HttpRequest, obj: SharingRequest | None) -> dict[str, Any]:
        if obj is None:
            return {}
        return {"can_review": obj.state == SharingState.PENDING and self.has_review_permission(request)}

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

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST ``decision=approve|deny`` for one request, through ``sharing_request_review``."""
        approve = request.POST.get("decision") == "approve"

        def perform(pending: SharingRequest) -> tuple[str, int]:
            sharing_request_review(request_id=pending.pk, operator=request.user, approve=approve)  # type: ignore[arg-type]
            verb = "Approved (a grant now releases the revision)" if approve else "Denied"
            return f"{verb}: sharing request {pending.pk}.", messages.SUCCESS

        return self.object_action(request, object_id, allowed=self.has_review_permission, perform=perform)

    @admin.display(description="revision")
    def revision_excerpt(self, obj: SharingRequest) -> str:
        return revision_link(obj.revision)

    @admin.display(description="to audience", ordering="audience_kind")
    def audience(self, obj: SharingRequest) -> str:
        return audience_text(obj)


@admin.register(SharingGrant)
class SharingGrantAdmin(ReadOnlyAdmin):
    """Grants are created only by decisions and only ever revoked; revocation applies on the next read."""

    list_display = (
        "id",
        "revision",
        "conversation",
        "audience",
        "granted_by_actor",
        "granted_by_user",
        "created_at",
        "revoked_at",
    )
    list_filter = (AgentFilter, ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("revision", "conversation", "granted_by_actor", "granted_by_user")
    search_fields = ("=id", "=revision__entry__id")
    show_full_result_count = False
    readonly_fields = ("audience",)
    actions = ("revoke_grants",)

    object_views = (("revoke", "revoke_view"),)

    @admin.action(description="Revoke selected grants", permissions=["revoke"])
    def revoke_grants(self, request: HttpRequest, queryset: QuerySet[SharingGrant]) -> None:
        revoked = 0
        for grant in queryset.filter(revoked_at__isnull=True):
            grant_revoke(grant_id=grant.pk, user=request.user)  # type: ignore[arg-type]
            revoked += 1
        self.message_user(request, f"Revoked {revoked} grant(s).", messages.SUCCESS)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("memory.change_sharinggrant"))

    def revoke_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def perform(grant: SharingGrant) -> tuple[str, int]:
            grant_revoke(grant_id=grant.pk, user=request.user)  # type: ignore[arg-type]
            return f"Revoked grant {grant.pk}: the next read no longer sees it.", messages.SUCCESS

        return self.object_action(request, object_id, allowed=self.has_revoke_permission, perform=perform)

    @admin.display(description="to audience", ordering="audience_kind")
    def audience(self, obj: SharingGrant) -> str:
        return audience_text(obj)


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


@admin.register(DeletedRevision)
class DeletedRevisionAdmin(ReadOnlyAdmin):
    """Revisions deleted with a conversation on request: replies built on one are judged revision by
    revision from then on (written by the revisions' ``record_deletion`` trigger)."""

    list_display = ("revision_id", "agent", "deleted_at")
    list_filter = (AgentFilter,)
    list_select_related = ("agent__tenant",)
    search_fields = ("=revision_id",)
    show_full_result_count = False


# --------------------------------------------------------------------------------------------------
# data rights: a person's export and erasure, from the actor admin
# --------------------------------------------------------------------------------------------------

admin.site.unregister(Actor)


@admin.register(Actor)
class PersonAdmin(ActorAdmin):
    """The actor admin, with a person's data rights as actions: export their data as JSON, and erase
    them (after a confirmation page listing what would go). Both go through the services of
    :mod:`memory.export` and :mod:`memory.erasure`; the scoped queryset keeps them to the operator's
    tenants."""

    actions = ("export_people", "erase_people")

    def has_export_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("accounts.view_actor"))

    def has_erase_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("accounts.delete_actor"))

    @admin.action(description="Export selected people's data (JSON)", permissions=["export"])
    def export_people(self, request: HttpRequest, queryset: QuerySet[Actor]) -> HttpResponse:
        actors = list(queryset.order_by("pk"))
        documents = [person_export_for_operator(actor) for actor in actors]
        response = JsonResponse(
            documents[0] if len(documents) == 1 else documents,
            safe=False,
            json_dumps_params={"indent": 2, "ensure_ascii": False},
        )
        names = "-".join(str(actor.pk) for actor in actors)
        response["Content-Disposition"] = f'attachment; filename="engram-person-{names}.json"'
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Erase selected people…", permissions=["erase"])
    def erase_people(self, request: HttpRequest, queryset: QuerySet[Actor]) -> HttpResponse | None:
        actors = list(queryset.order_by("pk"))
        if request.POST.get("confirm") != "yes":
            people = [
                {
                    "actor": actor,
                    "actors": [str(a) for a in person_actors(actor)],
                    "counts": erasure_plan(person_seeds(actor)).summary(),
                }
                for actor in actors
            ]
            return TemplateResponse(
                request,
                "admin/accounts/actor/erase_confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "opts": self.opts,
                    "people": people,
                    "action_checkbox_name": ACTION_CHECKBOX_NAME,
                    "title": "Erase people",
                },
            )
        for actor in actors:
            event = person_erase(actor=actor, requested_by=f"admin:{request.user.get_username()}")
            counts = ", ".join(f"{n} {what}" for what, n in sorted(event.counts.items()))
            self.message_user(request, f"Erased actor {actor.pk}; tombstone #{event.pk}: {counts}.", messages.SUCCESS)
        return None


@admin.register(ErasureEvent)
class ErasureEventAdmin(ReadOnlyAdmin):
    """Tombstones of erasures (a person on request, or a tenant's retention): counts, never content."""

    tenant_path = "tenant"
    list_display = ("id", "kind", "tenant", "actor_id", "state", "requested_by", "started_at", "completed_at")
    list_filter = ("kind", "state")
    list_select_related = ("tenant",)
    search_fields = ("=actor_id", "requested_by")
