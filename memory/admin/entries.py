"""Memory entries: the inspector page, amend (revision N+1 through ``revision_amend``, the operator as
provenance), forget and the review-flag queue. A memory is shown and found by its ``m:`` id
(``memory.admin.ids``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from accounts.admin import AgentFilter, ReadOnlyAdmin, isolated
from config.errors import Conflict, ServiceError
from history.admin import audience_readers_html, audience_text, shorten
from memory.admin.amend import AmendForm
from memory.admin.ids import MEMORY_SEARCH_HELP, entry_name_html, search_entries
from memory.admin.inspector import entry_inspection
from memory.models import EntryStatus, MemoryEntry, RevisionOrigin
from memory.services import Provenance, entry_forget, entry_review_clear, revision_amend


@admin.register(MemoryEntry)
class MemoryEntryAdmin(ReadOnlyAdmin):
    """An entry and, below it, its whole history. Writes go through services only."""

    change_form_template = "admin/memory/memoryentry/change_form.html"
    # Narrow enough for a 1,280 px screen between the navigation and the filters (some 630 px): the
    # statement wraps in a bounded column (engram_style.html) with its belief type and subject under it,
    # dates are days; the source audience is on the entry's page and in the filters.
    change_list_template = "admin/memory/memoryentry/change_list.html"
    list_display = ("memory", "belief", "status", "flagged", "owner", "created")
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
    search_help_text = MEMORY_SEARCH_HELP
    show_full_result_count = False
    fields = (
        "memory",
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
    readonly_fields = ("memory", "statement", "subject", "belief_type", "audience", "readers")
    actions = ("forget_entries", "clear_review_flags")

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryEntry]:
        return super().get_queryset(request).select_related("agent__tenant", "current_revision__subject")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[MemoryEntry], search_term: str
    ) -> tuple[QuerySet[MemoryEntry], bool]:
        return search_entries(request, queryset, search_term)

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

    @admin.display(description="memory", ordering="current_revision")
    def memory(self, obj: MemoryEntry) -> SafeString:
        return entry_name_html(obj)

    # A short header: the admin never wraps one, so a long one would set the column's width.
    @admin.display(description="statement")
    def belief(self, obj: MemoryEntry) -> SafeString | str:
        revision = obj.current_revision
        if revision is None:
            return "—"
        about = format_html(" · about {}", self.subject(obj)) if revision.subject is not None else ""
        return format_html(
            '{}<br><span class="engram-muted">{}{}</span>',
            self.statement(obj),
            revision.get_belief_type_display(),
            about,
        )

    @admin.display(description="flagged", boolean=True, ordering="flagged_for_review")
    def flagged(self, obj: MemoryEntry) -> bool:
        return obj.flagged_for_review

    @admin.display(description="agent", ordering="agent__name")
    def owner(self, obj: MemoryEntry) -> str:
        # Not the foreign key itself: the admin never wraps those, and this column may wrap.
        return str(obj.agent)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: MemoryEntry) -> str:
        return date_format(localtime(obj.created_at), "Y-m-d")

    @admin.display(description="statement (current revision)")
    def statement(self, obj: MemoryEntry) -> SafeString | str:
        return isolated(shorten(obj.current_revision.body, 120)) if obj.current_revision else "—"

    @admin.display(description="subject")
    def subject(self, obj: MemoryEntry) -> SafeString | str:
        revision = obj.current_revision
        if revision is None or revision.subject is None:
            return "—"
        return isolated(revision.subject.label)

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
                self.message_user(request, f"{entry.display_id}: {error.message}", messages.ERROR)
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
                return f"Forgot {entry.display_id}: it no longer appears in any recall.", messages.SUCCESS
            return f"{entry.display_id} was already forgotten.", messages.INFO

        return self.object_action(request, object_id, allowed=self.has_forget_permission, perform=perform)

    def clear_flag_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def perform(entry: MemoryEntry) -> tuple[str, int]:
            result = entry_review_clear(agent=entry.agent, entry_id=entry.pk)
            if result.changed:
                return f"Cleared the review flag of {entry.display_id}.", messages.SUCCESS
            return f"{entry.display_id} was not flagged.", messages.INFO

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
            self.message_user(request, f"{entry.display_id} is forgotten: it cannot be amended.", messages.ERROR)
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
                    f"Amended {entry.display_id}: revision {result.revision.number} ({result.revision.short_id}) "
                    "is now current: the memory is now named by it.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(self.change_url(entry))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Amend memory {entry.display_id}",
            "subtitle": None,
            "original": entry,
            "current": current,
            "form": form,
            "conflict": conflict,
            "media": self.media + form.media,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/memory/memoryentry/amend.html", context)
