"""Operator admin for conversations, their transcript, sessions, turns and search audit.

Messages and audit rows are immutable, so their pages are read-only. A conversation's title and
project may be edited; the change is written through ``conversation_upsert``.

The "retrieve as" previews on the conversation and turn pages are recall, so memory adds them
(``memory.previews``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.postgres.fields import ArrayField
from django.db.models import BigIntegerField, BooleanField, F, Func, QuerySet, Value
from django.db.models.functions import Cast
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from accounts.admin import (
    AgentFilter,
    ReadOnlyAdmin,
    ReadOnlyInline,
    TenantScopedAdmin,
    isolated,
    isolated_text,
    operator_tenant_ids,
)
from accounts.models import Actor, RuntimeAgent
from history.audience import Audience, AudienceColumns
from history.models import (
    Conversation,
    ConversationSearchEvent,
    Message,
    MessageDirection,
    MessageSearchDocument,
    MessageSourceEvidence,
    Session,
    Turn,
)
from history.services import conversation_upsert

FULLTEXT_HELP = "Full-text search of the text (any of the words), or a numeric id."


class _Matches(Func):
    """``tsvector @@ tsquery`` as a boolean filter expression."""

    template = "%(expressions)s"
    arg_joiner = " @@ "
    output_field = BooleanField()


def fulltext_search(
    request: HttpRequest, queryset: QuerySet[Any], search_term: str, document_path: str
) -> QuerySet[Any]:
    """Search through the trigger-maintained sidecar at ``document_path`` and its agent-qualified GIN
    index (``engram_agent_lexemes``) instead of scanning bodies, with the terms every other reader
    uses: any of the words, in any agent the operator may see."""
    term = search_term.strip()
    if not term:
        return queryset
    if term.isdigit():
        return queryset.filter(pk=int(term))
    agents = RuntimeAgent.objects.all()
    tenant_ids = operator_tenant_ids(request)
    if tenant_ids is not None:
        agents = agents.filter(tenant__in=tenant_ids)
    agent_ids = Cast(Value(list(agents.values_list("pk", flat=True))), ArrayField(BigIntegerField()))
    terms = Func(F(f"{document_path}__agent_id"), F(f"{document_path}__tsv"), function="engram_agent_lexemes")
    return queryset.filter(_Matches(terms, Func(agent_ids, Value(term), function="engram_agents_search_query")))


def audience_text(obj: AudienceColumns) -> str:
    return str(obj.audience)


def audience_readers_html(obj: AudienceColumns) -> str:
    """The readers of an audience as current actor labels (ids stay the stored truth)."""
    readers = list(obj.audience_readers)
    if not readers:
        return "—"
    actors = {a.pk: a.label for a in Actor.objects.filter(pk__in=readers)}
    return format_html_join(", ", "<bdi>{}</bdi>", ((actors.get(pk, f"unknown actor {pk}"),) for pk in readers))


def shorten(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


@admin.register(Conversation)
class ConversationAdmin(TenantScopedAdmin):
    change_form_template = "admin/history/conversation/change_form.html"
    list_display = ("__str__", "audience", "project", "connector", "agent", "updated_at")
    list_filter = (AgentFilter, "audience_kind", "connector__type")
    list_select_related = ("agent__tenant", "connector")
    search_fields = ("title", "=external_thread_id", "project")
    fields = (
        "agent",
        "connector",
        "external_thread_id",
        "title",
        "project",
        "audience",
        "readers",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("agent", "connector", "external_thread_id", "audience", "readers", "created_at", "updated_at")

    @admin.display(description="audience", ordering="audience_kind")
    def audience(self, obj: Conversation) -> str:
        return audience_text(obj)

    @admin.display(description="readers")
    def readers(self, obj: Conversation) -> str:
        return audience_readers_html(obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Conversations come from connectors (``conversation_upsert``), never from a blank form.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Conversation, form: Any, change: bool) -> None:
        conversation_upsert(
            agent=obj.agent,
            connector=obj.connector,
            external_thread_id=obj.external_thread_id,
            audience=obj.audience,
            title=obj.title,
            project=obj.project,
        )


class SourceEvidenceInline(ReadOnlyInline):
    model = MessageSourceEvidence
    fields = ("method", "detail", "recorded_at")
    show_change_link = False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "excerpt", "sender", "conversation", "direction", "audience", "evidence_method", "created_at")
    list_filter = (AgentFilter, "direction", "audience_kind")
    list_select_related = ("actor", "conversation__connector", "evidence")
    search_fields = ("body",)
    search_help_text = FULLTEXT_HELP
    show_full_result_count = False
    fields = (
        "agent",
        "conversation",
        "sender",
        "direction",
        "external_id",
        "text",
        "audience",
        "readers",
        "created_at",
        "ingested_at",
        "history_message_ids",
        "memory_revision_ids",
        "cited_revision_ids",
        "lineage",
    )
    readonly_fields = ("sender", "text", "audience", "readers", "lineage")
    inlines = (SourceEvidenceInline,)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        return fulltext_search(request, queryset, search_term, "search_document"), False

    @admin.display(description="body")
    def excerpt(self, obj: Message) -> SafeString:
        return isolated(shorten(obj.body))

    @admin.display(description="actor", ordering="actor")
    def sender(self, obj: Message) -> SafeString | str:
        return isolated(obj.actor.label) if obj.actor is not None else "—"

    @admin.display(description="body")
    def text(self, obj: Message) -> SafeString:
        return isolated_text(obj.body)

    @admin.display(description="audience", ordering="audience_kind")
    def audience(self, obj: Message) -> str:
        return audience_text(obj)

    @admin.display(description="readers")
    def readers(self, obj: Message) -> str:
        return audience_readers_html(obj)

    @admin.display(description="lineage (folded when the reply was delivered)")
    def lineage(self, obj: Message) -> str:
        """Where the messages this reply was built from were posted, transitively; ``unknown`` admits no
        destination. Their conversations must still exist and the used revisions are checked live."""
        if obj.direction != MessageDirection.OUTBOUND:
            return "-"
        audiences = ", ".join(str(Audience(kind, ns, tuple(readers))) for kind, ns, readers in obj.lineage_audiences)
        return (
            f"sources posted under: {audiences or 'nothing (built on no message)'}; "
            f"conversations {list(obj.lineage_conversation_ids)}; "
            f"revisions used upstream: {len(obj.lineage_revision_ids)}"
        )

    @admin.display(description="evidence")
    def evidence_method(self, obj: Message) -> str:
        evidence = getattr(obj, "evidence", None)
        # No evidence row means unknown provenance: the message is eligible for no audience.
        return evidence.method if evidence is not None else "unknown"


@admin.register(MessageSourceEvidence)
class MessageSourceEvidenceAdmin(ReadOnlyAdmin):
    tenant_path = "message__agent__tenant"
    list_display = ("message", "method", "recorded_at")
    list_filter = ("method",)
    list_select_related = ("message",)
    search_fields = ("=message__id",)
    show_full_result_count = False


@admin.register(MessageSearchDocument)
class MessageSearchDocumentAdmin(ReadOnlyAdmin):
    tenant_path = "message__agent__tenant"
    list_display = ("message", "agent_id", "terms")
    list_select_related = ("message",)
    search_fields = ("=message__id",)
    show_full_result_count = False

    @admin.display(description="tsvector")
    def terms(self, obj: MessageSearchDocument) -> str:
        return shorten(str(obj.tsv))


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ("id", "conversation", "kind", "parent", "watermark", "snapshot_digest", "created_at")
    list_filter = (AgentFilter, "kind")
    list_select_related = ("conversation__connector",)
    search_fields = ("=id", "=snapshot_sha256")
    show_full_result_count = False

    @admin.display(description="snapshot sha256")
    def snapshot_digest(self, obj: Session) -> str:
        return obj.snapshot_sha256[:12]


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    change_form_template = "admin/history/turn/change_form.html"
    list_display = ("id", "session", "requester", "audience", "state", "rounds_used", "failure_code", "created_at")
    list_filter = (AgentFilter, "state")
    list_select_related = ("requester", "session")
    search_fields = ("=id", "=inbound_message__id")
    show_full_result_count = False
    readonly_fields = ("audience",)

    @admin.display(description="destination audience", ordering="audience_kind")
    def audience(self, obj: Turn) -> str:
        return audience_text(obj)


@admin.register(ConversationSearchEvent)
class ConversationSearchEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "turn", "degradation", "exclusion_counts", "blocked_count", "created_at")
    list_filter = (AgentFilter, ("degradation", admin.EmptyFieldListFilter))
    list_select_related = ("agent__tenant", "turn")
    search_fields = ("=id", "=query_digest")
    show_full_result_count = False
