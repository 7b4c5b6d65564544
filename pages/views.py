"""The end user's pages: the front door, their turns, "what did you know" for one turn, the rejection flow.

Server-rendered and usable without JavaScript. Views are thin: they resolve the viewer's objects
through :mod:`memory.selectors` (a turn, message or item the viewer may not see is a 404, exactly like
a missing one), call :func:`memory.rejections.rejection_record` for writes, and render. Whether a
correction applies or is filed for review is decided there, not here (docs/corrections.md); the page
only says which it will be.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST, require_safe

from config.errors import NotFound, ServiceError
from config.replica import routed_read
from history.models import Turn
from memory.export import person_export_for_viewer
from memory.models import RecallTraceItem, RejectionKind
from memory.rejections import MAX_CORRECTION_LENGTH, rejection_record, rejection_summary
from memory.selectors import (
    CorrectionTarget,
    message_for_viewer,
    turn_explanation,
    turn_for_viewer,
    turn_traces,
    turns_for_viewer,
    written_correction_target,
)

TURNS_PER_PAGE = 20


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    """A signed-in user goes straight to their turns; anyone else gets the landing page (which reads
    nothing from the database, so it answers even for a visitor with no account)."""
    if request.user.is_authenticated:
        return HttpResponseRedirect(reverse("engram-turns"))
    return render(request, "pages/home.html")


class RejectionForm(forms.Form):
    kind = forms.ChoiceField(choices=RejectionKind.choices)
    correction = forms.CharField(required=False, max_length=MAX_CORRECTION_LENGTH, strip=True)


def signed_in(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in person of a page view behind ``login_required``."""
    user = request.user
    assert isinstance(user, AbstractBaseUser)  # every view here is behind login_required
    return user


@require_GET
@login_required
@routed_read
def turn_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(turns_for_viewer(signed_in(request)), TURNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "pages/turn_list.html", {"page": page})


@require_GET
@login_required
@routed_read
def turn_detail(request: HttpRequest, turn_id: int) -> HttpResponse:
    user = signed_in(request)
    turn = _turn(user, turn_id)
    return render(request, "pages/turn_detail.html", {"explanation": turn_explanation(user, turn)})


@require_POST
@login_required
def rejection_create(request: HttpRequest, turn_id: int, item_id: int) -> HttpResponse:
    """Apply one rejection kind to one recalled item of this turn's page (or, from a bystander, file it
    for review), then show the page again (POST, redirect, GET) with what committed, or why nothing did."""
    user = signed_in(request)
    turn = _turn(user, turn_id)
    if not RecallTraceItem.objects.filter(pk=item_id, trace__in=turn_traces(turn)).exists():
        raise Http404("item not found")
    return _reject(request, turn, f"item-{item_id}", trace_item_id=item_id)


@require_POST
@login_required
def written_rejection_create(request: HttpRequest, turn_id: int, revision_id: int) -> HttpResponse:
    """The same for a memory this turn wrote (its ledger names it), which no recall showed."""
    user = signed_in(request)
    turn = _turn(user, turn_id)
    try:
        target = written_correction_target(user, turn, revision_id)
    except NotFound as missing:
        raise Http404(missing.message) from missing
    return _reject(request, turn, f"memory-{revision_id}", target=target)


def _turn(user: AbstractBaseUser, turn_id: int) -> Turn:
    try:
        return turn_for_viewer(user, turn_id)
    except NotFound as missing:
        raise Http404(missing.message) from missing


def _reject(
    request: HttpRequest,
    turn: Turn,
    anchor: str,
    *,
    trace_item_id: int | None = None,
    target: CorrectionTarget | None = None,
) -> HttpResponse:
    target_url = reverse("engram-turn", args=[turn.pk]) + f"#{anchor}"
    form = RejectionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "That correction could not be read; nothing was changed.")
        return HttpResponseRedirect(target_url)
    try:
        rejection = rejection_record(
            user=signed_in(request),
            trace_item_id=trace_item_id,
            target=target,
            kind=form.cleaned_data["kind"],
            correction=form.cleaned_data["correction"],
        )
    except NotFound as missing:
        raise Http404(missing.message) from missing
    except ServiceError as refused:
        messages.error(request, f"Nothing was changed: {refused.message}.")
    else:
        messages.success(request, rejection_summary(rejection))
    return HttpResponseRedirect(target_url)


@require_GET
@login_required
@routed_read
def message_detail(request: HttpRequest, message_id: int) -> HttpResponse:
    try:
        message = message_for_viewer(signed_in(request), message_id)
    except NotFound as missing:
        raise Http404(missing.message) from missing
    return render(request, "pages/message_detail.html", {"message": message})


@require_GET
@login_required
def my_data_export(request: HttpRequest) -> HttpResponse:
    """The logged-in person's own data as a JSON download, within their view ceiling (memory.export)."""
    document = person_export_for_viewer(signed_in(request))
    response = JsonResponse(document, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = 'attachment; filename="engram-my-data.json"'
    response["Cache-Control"] = "no-store"
    return response
