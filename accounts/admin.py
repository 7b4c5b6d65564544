"""Operator admin for tenants, agents, credentials and actors, and the tenant scoping every admin uses.

Operators are staff users scoped to tenants through ``OperatorScope``; superusers see everything.
``TenantScopedAdmin`` narrows each changelist, change page, foreign-key choice and agent filter to the
operator's tenants, so a row of another tenant answers exactly as a missing one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.db.models.fields.related import ForeignKey, ManyToManyField
from django.forms import ModelChoiceField, ModelMultipleChoiceField
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.defaultfilters import linebreaksbr
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString

from accounts.models import Actor, ApiKey, Connector, IdentityLink, OperatorScope, RuntimeAgent, Tenant, UserActor
from accounts.services import actor_rename, api_key_create, api_key_revoke
from config.errors import ServiceError
from config.replica import routed_read


def isolated(text: object) -> SafeString:
    """Text people or models wrote (a statement, a message body, a display name) in its own bidi
    isolate: a right-to-left override inside it (U+202E) reverses only itself, never the ids, names and
    columns the admin shows after it."""
    return format_html("<bdi>{}</bdi>", text)


def isolated_text(text: str) -> SafeString:
    """A whole message or statement on its page: isolated, its line breaks kept."""
    return format_html("<bdi>{}</bdi>", linebreaksbr(text))


def operator_tenant_ids(request: HttpRequest) -> QuerySet[OperatorScope, int] | None:
    """The tenants the requesting user may see, as a subquery; ``None`` means every tenant."""
    user = request.user
    if user.is_active and user.is_superuser:
        return None
    scopes = OperatorScope.objects.filter(user_id=user.pk) if user.pk is not None else OperatorScope.objects.none()
    return scopes.values_list("tenant_id", flat=True)


@routed_read
def _routed_changelist(
    view: Callable[[HttpRequest, dict[str, Any] | None], HttpResponse],
    request: HttpRequest,
    extra_context: dict[str, Any] | None,
) -> HttpResponse:
    response = view(request, extra_context)
    render = getattr(response, "render", None)
    return render() if render is not None else response


class TenantScopedAdmin(admin.ModelAdmin):
    """A ``ModelAdmin`` showing only rows of the operator's tenants.

    ``tenant_path`` is the lookup from the model to its tenant (``"pk"`` on ``Tenant`` itself);
    ``None`` marks installation-wide rows (embedding generations, the index outbox) that only
    superusers see.
    """

    tenant_path: str | None = "agent__tenant"

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """A list shown (GET) is read on the read replica when one is configured (config.replica),
        rendered inside the read so that its lazy querysets are evaluated there too."""
        if request.method != "GET":
            return super().changelist_view(request, extra_context)
        return _routed_changelist(super().changelist_view, request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return self.scope(super().get_queryset(request), request)

    def scope(self, queryset: QuerySet[Any], request: HttpRequest) -> QuerySet[Any]:
        tenant_ids = operator_tenant_ids(request)
        if tenant_ids is None:
            return queryset
        if self.tenant_path is None:
            return queryset.none()
        return queryset.filter(**{f"{self.tenant_path}__in": tenant_ids})

    def formfield_for_foreignkey(
        self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelChoiceField[Any] | None:
        # Choices (and the ids a raw-id or autocomplete widget accepts) come from the related admin's
        # scoped queryset, so a form cannot point at another tenant's row.
        related_admin = self.admin_site._registry.get(db_field.remote_field.model)
        if isinstance(related_admin, TenantScopedAdmin) and "queryset" not in kwargs:
            kwargs["queryset"] = related_admin.get_queryset(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(
        self, db_field: ManyToManyField[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelMultipleChoiceField[Any] | None:
        related_admin = self.admin_site._registry.get(db_field.remote_field.model)
        if isinstance(related_admin, TenantScopedAdmin) and "queryset" not in kwargs:
            kwargs["queryset"] = related_admin.get_queryset(request)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    # ---------------------------------------------------------------------------------------------
    # per-object views (buttons on a change page), registered through ``get_urls``
    # ---------------------------------------------------------------------------------------------

    #: Per-object views as (URL suffix, method name), registered before the admin's own URLs.
    object_views: tuple[tuple[str, str], ...] = ()

    def get_urls(self) -> list[URLPattern]:
        own = [self.object_url(suffix, getattr(self, name)) for suffix, name in self.object_views]
        return [*own, *super().get_urls()]

    def change_form_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        """What a change page shows beyond its form (the buttons it may offer, inspections); ``obj`` is
        None on an add page."""
        return {}

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context.update(self.change_form_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def object_url(self, suffix: str, view: Callable[..., HttpResponse]) -> URLPattern:
        """``<object_id>/<suffix>/`` named ``<app>_<model>_<suffix>``, behind the admin's login and CSRF
        checks. Return these *before* ``super().get_urls()``, whose catch-all would shadow them."""
        opts = self.opts
        return path(
            f"<path:object_id>/{suffix}/",
            self.admin_site.admin_view(view),
            name=f"{opts.app_label}_{opts.model_name}_{suffix.replace('-', '_')}",
        )

    def scoped_object_or_none(self, request: HttpRequest, object_id: str) -> Any:
        """The object through the scoped queryset: another tenant's row is ``None``, like a missing one."""
        return self.get_object(request, unquote(object_id))

    def change_url(self, obj: Model) -> str:
        return admin_change_url(obj)

    def missing_redirect(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What the admin answers for a missing object (a warning and the index), also used for rows
        of other tenants."""
        self.message_user(
            request, f"{self.opts.verbose_name} with ID “{unquote(object_id)}” does not exist.", messages.WARNING
        )
        return HttpResponseRedirect(reverse("admin:index", current_app=self.admin_site.name))

    def object_action(
        self,
        request: HttpRequest,
        object_id: str,
        *,
        allowed: Callable[[HttpRequest], bool],
        perform: Callable[[Any], tuple[str, int]],
    ) -> HttpResponse:
        """Run one write on one object from a change-page button, then go back.

        POST only. ``allowed`` is the admin-action permission check (403 when it fails); a row outside
        the operator's tenants answers like a missing one. ``perform`` calls the service and returns
        the message and its level; a ``ServiceError`` becomes an error message and writes nothing.
        The response redirects to a same-host ``next`` or to the object's change page.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not allowed(request):
            raise PermissionDenied
        obj = self.scoped_object_or_none(request, object_id)
        if obj is None:
            return self.missing_redirect(request, object_id)
        try:
            message, level = perform(obj)
        except ServiceError as error:
            message, level = error.message, messages.ERROR
        self.message_user(request, message, level)
        return HttpResponseRedirect(safe_next(request) or self.change_url(obj))


def admin_change_url(obj: Model | int, *, model: type[Model] | None = None) -> str:
    """The admin change page of ``obj``, or of the row ``obj`` of ``model`` when given an id."""
    if isinstance(obj, Model):
        model, pk = type(obj), obj.pk
    else:
        pk = obj
    assert model is not None, "an id needs its model"
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(pk)])


def safe_next(request: HttpRequest) -> str | None:
    """The ``next`` parameter when it points back into this site, else ``None``."""
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


class ReadOnlyAdmin(TenantScopedAdmin):
    """Rows the admin may show but never add, edit or delete: immutable tables (the database refuses
    UPDATE and DELETE anyway) and rows only a service may write."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # Inline forms are built even when view-only: every shown field must be declared read-only.
        return tuple(dict.fromkeys([*(self.fields or ()), *self.readonly_fields]))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AgentFilter(admin.SimpleListFilter):
    """Filter by agent, offering only the agents of the operator's tenants (the stock related-field
    filter would list every agent of the installation)."""

    title = "agent"
    parameter_name = "agent"
    #: The lookup from the admin's model to its agent.
    agent_field = "agent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        agents = RuntimeAgent.objects.select_related("tenant").order_by("tenant__slug", "name")
        tenant_ids = operator_tenant_ids(request)
        if tenant_ids is not None:
            agents = agents.filter(tenant__in=tenant_ids)
        return [(str(agent.pk), str(agent)) for agent in agents]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if value is None or not value.isdigit():
            return queryset
        return queryset.filter(**{f"{self.agent_field}_id": int(value)})


def fixed_values_filter(field: str, values: list[str], title: str | None = None) -> type[admin.SimpleListFilter]:
    """A list filter offering a known set of values of ``field``. The stock filter for a column
    without choices lists ``SELECT DISTINCT`` over the whole table on every changelist load, which an
    audit table of millions of rows cannot afford."""

    class FixedValuesFilter(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
            return [(value, value) for value in values]

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
            value = self.value()
            return queryset.filter(**{field: value}) if value in values else queryset

    FixedValuesFilter.title = title or field.replace("_", " ")
    return FixedValuesFilter


class TenantFilter(admin.SimpleListFilter):
    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        tenants = Tenant.objects.order_by("slug")
        tenant_ids = operator_tenant_ids(request)
        if tenant_ids is not None:
            tenants = tenants.filter(pk__in=tenant_ids)
        return [(str(tenant.pk), tenant.name) for tenant in tenants]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if value is None or not value.isdigit():
            return queryset
        return queryset.filter(tenant_id=int(value))


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "pk"
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        # An operator could not see a tenant they created: only superusers open new workspaces.
        return bool(request.user.is_superuser)


@admin.register(RuntimeAgent)
class RuntimeAgentAdmin(TenantScopedAdmin):
    tenant_path = "tenant"
    list_display = ("name", "tenant", "created_at")
    list_filter = (TenantFilter,)
    list_select_related = ("tenant",)
    search_fields = ("name", "tenant__name", "tenant__slug")
    autocomplete_fields = ("tenant",)
    actions = ("issue_api_key",)

    @admin.action(description="Issue an API key", permissions=["issue_key"])
    def issue_api_key(self, request: HttpRequest, queryset: QuerySet[RuntimeAgent]) -> None:
        for agent in queryset.select_related("tenant"):
            issued = api_key_create(agent=agent, label=f"issued in the admin by {request.user.get_username()}")
            # The secret exists only in this message: the database keeps its digest.
            self.message_user(
                request,
                f"New key for {agent}: {issued.secret} — copy it now, it will not be shown again.",
                messages.SUCCESS,
            )

    def has_issue_key_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("accounts.add_apikey"))


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    """Keys are issued from the agent list and only ever revoked; the digest is never shown."""

    fields = ("prefix", "label", "agent", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_display = ("prefix", "label", "agent", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = (AgentFilter, ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("agent__tenant",)
    search_fields = ("prefix", "label")
    actions = ("revoke_keys",)

    @admin.action(description="Revoke selected keys", permissions=["revoke"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(api_key=api_key)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("accounts.change_apikey"))


@admin.register(Connector)
class ConnectorAdmin(TenantScopedAdmin):
    list_display = ("namespace", "agent", "created_at")
    list_filter = (AgentFilter, "type")
    list_select_related = ("agent__tenant",)
    search_fields = ("type", "name")
    autocomplete_fields = ("agent",)


@admin.register(Actor)
class ActorAdmin(TenantScopedAdmin):
    tenant_path = "tenant"
    list_display = ("name", "external_id", "connector", "is_agent", "tenant", "created_at")
    list_filter = (TenantFilter, "is_agent", "connector__type")
    list_select_related = ("tenant", "connector")
    search_fields = ("display_name", "=external_id")
    autocomplete_fields = ("tenant", "connector")

    @admin.display(description="display name", ordering="display_name")
    def name(self, obj: Actor) -> SafeString:
        return isolated(obj.display_name)

    def get_readonly_fields(self, request: HttpRequest, obj: Actor | None = None) -> tuple[str, ...]:
        # An actor's identity is (connector, external id); only the display name may change later.
        if obj is not None:
            return ("tenant", "connector", "external_id", "is_agent", "created_at")
        return ("created_at",)

    def save_model(self, request: HttpRequest, obj: Actor, form: Any, change: bool) -> None:
        if change:
            actor_rename(actor=obj, display_name=obj.display_name)
        else:
            super().save_model(request, obj, form, change)


@admin.register(IdentityLink)
class IdentityLinkAdmin(TenantScopedAdmin):
    list_display = ("id", "agent", "actor_a", "actor_b", "verified_at", "revoked_at")
    list_filter = (AgentFilter, ("revoked_at", admin.EmptyFieldListFilter))
    list_select_related = ("agent__tenant", "actor_a", "actor_b")
    search_fields = ("actor_a__display_name", "actor_b__display_name", "=actor_a__external_id", "=actor_b__external_id")
    autocomplete_fields = ("agent", "actor_a", "actor_b")

    def save_model(self, request: HttpRequest, obj: IdentityLink, form: Any, change: bool) -> None:
        # The pair is stored ordered (a check constraint), whichever way round the operator entered it.
        if obj.actor_a_id is not None and obj.actor_b_id is not None and obj.actor_a_id > obj.actor_b_id:
            obj.actor_a_id, obj.actor_b_id = obj.actor_b_id, obj.actor_a_id
        super().save_model(request, obj, form, change)


@admin.register(UserActor)
class UserActorAdmin(TenantScopedAdmin):
    tenant_path = "actor__tenant"
    list_display = ("user", "actor", "created_at")
    list_select_related = ("user", "actor")
    search_fields = ("user__username", "actor__display_name", "=actor__external_id")
    autocomplete_fields = ("actor",)
    raw_id_fields = ("user",)


@admin.register(OperatorScope)
class OperatorScopeAdmin(TenantScopedAdmin):
    tenant_path = "tenant"
    list_display = ("user", "tenant")
    list_filter = (TenantFilter,)
    list_select_related = ("user", "tenant")
    search_fields = ("user__username", "tenant__name")
    autocomplete_fields = ("tenant",)
    raw_id_fields = ("user",)
