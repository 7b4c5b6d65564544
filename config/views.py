"""Site-wide error views. API paths answer errors in the API's own
error format, never an HTML page; every other path gets the site's own pages (templates/404.html, …)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request as bad_request_page
from django.views.defaults import page_not_found, server_error
from django.views.defaults import permission_denied as permission_denied_page

from config.api import error_body


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(error_body("not_found", "not found"), status=404)
    return page_not_found(request, exception or Http404())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Requests Django refuses before any view runs (a missing or disallowed Host header, say)."""
    if _is_api(request):
        return JsonResponse(error_body("bad_request", "bad request"), status=400)
    return bad_request_page(request, exception or Exception())


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """A Django ``PermissionDenied`` no API view turned into its own answer (DRF views already do)."""
    if _is_api(request):
        return JsonResponse(error_body("forbidden", "you may not do this"), status=403)
    return permission_denied_page(request, exception or Exception())


def server_failure(request: HttpRequest) -> HttpResponse:
    """An unhandled exception. The page is rendered with a bare context (templates/500.html needs no
    request and no database: the failure may be the database itself)."""
    if _is_api(request):
        return JsonResponse(error_body("server_error", "the server failed to answer this request"), status=500)
    return server_error(request)
