"""The operator's "retrieve as" previews, on history's conversation and turn admin pages.

"Retrieve as this turn" (on a turn) and "Retrieve as…" (on a conversation, with a requester picker)
call the one retrieval service, ``memory.retrieval.service.recall``, at the ``preview`` moment: the
same eligibility, ranking and rendering a real turn gets, recorded as a trace like any other recall.

Recall is memory's, so memory adds the preview to history's admin pages (subclasses registered in
their place) rather than history importing memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from accounts.models import Actor
from history.admin import ConversationAdmin, TurnAdmin
from history.models import Conversation, Message, Turn
from memory.models import RecallMoment
from memory.retrieval.eligibility import Perspective, perspective_for_conversation, perspective_for_turn
from memory.retrieval.moments import RECENT_MESSAGES
from memory.retrieval.query import RecallQuery, form_query
from memory.retrieval.service import RecallResult, recall, task_budget


@dataclass(frozen=True)
class Preview:
    perspective: Perspective
    query: RecallQuery
    result: RecallResult
    requester: Actor | None


def recall_preview(*, perspective: Perspective, message: str, recent_texts: Sequence[str] = ()) -> Preview:
    """What a turn of ``perspective`` asking ``message`` would be given: the query former and the one
    retrieval service with the in-turn budget, at the ``preview`` moment (its trace is an operator's).

    The trace is tied to no session or turn, so the end user's "what did you know" for a real turn
    never lists an operator's preview.
    """
    actors = list(Actor.objects.filter(connector__agent_id=perspective.agent_id).only("display_name", "external_id"))
    query = form_query(
        message=message, recent_texts=recent_texts, requester_id=perspective.requester_id, known_actors=actors
    )
    result = recall(
        perspective=perspective, query=query, budget=task_budget(), moment=RecallMoment.PREVIEW, profile="task"
    )
    requester = next((a for a in actors if a.pk == perspective.requester_id), None)
    return Preview(perspective=perspective, query=query, result=result, requester=requester)


def recent_texts_before(message: Message) -> list[str]:
    """The earlier messages of the conversation the query former reads, oldest first (as in a turn)."""
    recent = (
        Message.objects.filter(conversation_id=message.conversation_id, created_at__lte=message.created_at)
        .exclude(pk=message.pk)
        .order_by("-created_at", "-id")
        .values_list("body", flat=True)[:RECENT_MESSAGES]
    )
    return list(recent)[::-1]


def has_preview_permission(request: HttpRequest) -> bool:
    """A preview shows memory statements and writes a trace: it needs both view permissions."""
    user = request.user
    return bool(user.has_perm("memory.view_memoryentry") and user.has_perm("memory.view_recalltrace"))


def render_preview(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[Any],
    *,
    obj: Any,
    title: str,
    preview: Preview | None,
    form: forms.Form | None = None,
) -> TemplateResponse:
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "original": obj,
        "title": title,
        "subtitle": None,
        "preview": preview,
        "form": form,
        "has_view_permission": True,
    }
    return TemplateResponse(request, "admin/memory/recall_preview.html", context)


class ActorChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return str(obj.label)


class ConversationPreviewForm(forms.Form):
    requester = ActorChoiceField(queryset=Actor.objects.none(), required=False, empty_label="(nobody: no requester)")
    message = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="The inbound message of the imagined turn; empty ranks by subject and recency.",
    )

    def __init__(self, *args: Any, conversation: Conversation, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        requester = self.fields["requester"]
        assert isinstance(requester, forms.ModelChoiceField)
        # The people of this conversation: its readers and whoever has written in it.
        authors = Message.objects.filter(conversation=conversation, actor__isnull=False).values("actor_id")
        requester.queryset = (
            Actor.objects.filter(connector__agent_id=conversation.agent_id, is_agent=False)
            .filter(Q(pk__in=list(conversation.audience_readers)) | Q(pk__in=authors))
            .order_by("display_name", "pk")
        )


class ConversationPreviewAdmin(ConversationAdmin):
    object_views = (("preview", "preview_view"),)

    def change_form_context(self, request: HttpRequest, obj: Conversation | None) -> dict[str, Any]:
        return {"can_preview": has_preview_permission(request)}

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A turn in this conversation as it stands now, asked by the picked requester."""
        if not has_preview_permission(request):
            raise PermissionDenied
        conversation = self.scoped_object_or_none(request, object_id)
        if conversation is None:
            return self.missing_redirect(request, object_id)
        if not self.has_view_or_change_permission(request, conversation):
            raise PermissionDenied
        form = ConversationPreviewForm(request.GET if "run" in request.GET else None, conversation=conversation)
        preview = None
        if form.is_bound and form.is_valid():
            requester = form.cleaned_data["requester"]
            preview = recall_preview(
                perspective=perspective_for_conversation(
                    conversation, requester_id=requester.pk if requester is not None else None
                ),
                message=form.cleaned_data["message"],
            )
        return render_preview(
            request, self, obj=conversation, title=f"Retrieve as a turn in {conversation}", preview=preview, form=form
        )


class TurnPreviewAdmin(TurnAdmin):
    object_views = (("preview", "preview_view"),)

    def change_form_context(self, request: HttpRequest, obj: Turn | None) -> dict[str, Any]:
        return {"can_preview": has_preview_permission(request)}

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Recall for this turn's perspective and inbound message, as the turn would get it now."""
        if not has_preview_permission(request):
            raise PermissionDenied
        turn = self.scoped_object_or_none(request, object_id)
        if turn is None:
            return self.missing_redirect(request, object_id)
        if not self.has_view_or_change_permission(request, turn):
            raise PermissionDenied
        turn = Turn.objects.select_related("session__conversation", "inbound_message").get(pk=turn.pk)
        preview = recall_preview(
            perspective=perspective_for_turn(turn),
            message=turn.inbound_message.body,
            recent_texts=recent_texts_before(turn.inbound_message),
        )
        return render_preview(request, self, obj=turn, title=f"Retrieve as turn {turn.pk}", preview=preview)


admin.site.unregister(Conversation)
admin.site.register(Conversation, ConversationPreviewAdmin)
admin.site.unregister(Turn)
admin.site.register(Turn, TurnPreviewAdmin)
