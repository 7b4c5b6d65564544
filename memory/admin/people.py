"""Data rights: a person's export and erasure from the actor admin, and the erasures' tombstones."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

from accounts.admin import ActorAdmin, ReadOnlyAdmin
from accounts.models import Actor
from memory.erasure import erasure_plan, person_actors, person_erase, person_seeds
from memory.export import person_export_for_operator
from memory.models import ErasureEvent

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
