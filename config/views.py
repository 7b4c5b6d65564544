"""Site-wide error views: API paths answer in the API's own error format, never an HTML page."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request as bad_request_page
from django.views.defaults import page_not_found

from config.api import error_body


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "not found"), status=404)
    return page_not_found(request, exception or Http404())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Requests Django refuses before any view runs (a missing or disallowed Host header, say)."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("bad_request", "bad request"), status=400)
    return bad_request_page(request, exception or Exception())
