"""The person's "what the agent knows about you" page: every live memory about them or resting on their
words, within their view ceiling (:mod:`memory.known`), with the corrections and sharing withdrawals
they may make from it.

Thin views: the selector decides what is listed and which memory may be corrected here (anything
else is a 404, exactly like a missing one); :func:`memory.rejections.rejection_record` decides whether
a correction applies or is filed for review, and :func:`memory.sharing.grant_revoke` who may withdraw
a grant. Writes are POST, redirect, GET, with what committed in a flash message.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from config.errors import NotFound, ServiceError
from config.replica import routed_read
from memory.known import MAX_QUERY_LENGTH, known_correction_target, known_memories
from memory.models import RejectionKind, short_id
from memory.rejections import MAX_CORRECTION_LENGTH, rejection_record, rejection_summary
from memory.sharing import grant_revoke
from pages.views import signed_in


class KnownSearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=MAX_QUERY_LENGTH, strip=True)


class KnownRejectionForm(forms.Form):
    #: "True elsewhere, not here" needs a conversation: it is said from a turn page in that conversation.
    kind = forms.ChoiceField(choices=[(k, label) for k, label in RejectionKind.choices if k != RejectionKind.NOT_HERE])
    correction = forms.CharField(required=False, max_length=MAX_CORRECTION_LENGTH, strip=True)


@require_GET
@login_required
@routed_read
def about_you(request: HttpRequest) -> HttpResponse:
    search = KnownSearchForm(request.GET)
    query = search.cleaned_data["q"] if search.is_valid() else ""
    known = known_memories(signed_in(request), query=query, page=request.GET.get("page"))
    return render(request, "pages/about.html", {"known": known, "search": search})


@require_POST
@login_required
def about_you_reject(request: HttpRequest, revision_id: int) -> HttpResponse:
    """Correct (or, from a bystander, report) one memory listed on the person's page."""
    user = signed_in(request)
    try:
        target = known_correction_target(user, revision_id)
    except NotFound as missing:
        raise Http404(missing.message) from missing
    back = reverse("engram-about") + f"#memory-{short_id(revision_id)[2:]}"
    form = KnownRejectionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "That correction could not be read; nothing was changed.")
        return HttpResponseRedirect(back)
    try:
        rejection = rejection_record(
            user=user, target=target, kind=form.cleaned_data["kind"], correction=form.cleaned_data["correction"]
        )
    except ServiceError as refused:
        messages.error(request, f"Nothing was changed: {refused.message}.")
        return HttpResponseRedirect(back)
    messages.success(request, rejection_summary(rejection))
    if rejection.resulting_revision is not None:
        back = reverse("engram-about") + f"#memory-{rejection.resulting_revision.short_id[2:]}"
    return HttpResponseRedirect(back)


@require_POST
@login_required
def about_you_revoke(request: HttpRequest, grant_id: int) -> HttpResponse:
    """Withdraw a sharing grant the person consented to. The page offers the button only for those; any
    other grant (someone else's consent, an operator's approval, or none at all) is a 404 exactly like
    a missing one, and changes nothing."""
    try:
        grant = grant_revoke(grant_id=grant_id, user=signed_in(request))
    except NotFound as missing:
        raise Http404(missing.message) from missing
    messages.success(
        request,
        f"Stopped sharing [{short_id(grant.revision_id)}]: the agent no longer brings it into that conversation.",
    )
    return HttpResponseRedirect(reverse("engram-about"))
