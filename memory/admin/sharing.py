"""Sharing requests (decided on review) and grants (revoked, never edited), through their services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse

from accounts.admin import AgentFilter, ReadOnlyAdmin
from config.errors import ServiceError
from history.admin import audience_text
from memory.admin.revisions import revision_link
from memory.models import SharingConsent, SharingGrant, SharingRequest, SharingState
from memory.sharing import grant_revoke, sharing_request_review


@admin.register(SharingRequest)
class SharingRequestAdmin(ReadOnlyAdmin):
    """Operators review pending requests; approving creates a grant through the sharing service."""

    change_form_template = "admin/memory/sharingrequest/change_form.html"
    list_display = ("id", "revision_excerpt", "audience", "conversation", "consents", "state", "created_at")
    list_filter = (AgentFilter, "state")
    list_select_related = ("revision", "conversation")
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

    @admin.display(description="consent of")
    def consents(self, obj: SharingRequest) -> str:
        """Each person the request asks, and their answer so far."""
        return consent_text(obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[SharingRequest]:
        consents = SharingConsent.objects.select_related("actor").order_by("pk")
        return super().get_queryset(request).prefetch_related(Prefetch("consents", queryset=consents))


def consent_text(request: SharingRequest) -> str:
    return "; ".join(
        f"{consent.actor.label} ({consent.get_role_display().lower()}): {consent.state}"
        for consent in request.consents.all()
    )


@admin.register(SharingConsent)
class SharingConsentAdmin(ReadOnlyAdmin):
    """Each person's answer to a sharing request: given or refused by that person, never edited here."""

    tenant_path = "request__agent__tenant"
    list_display = ("id", "request", "actor", "role", "state", "decided_at")
    list_filter = ("role", "state")
    list_select_related = ("request", "actor")
    search_fields = ("=request__id",)
    show_full_result_count = False


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
