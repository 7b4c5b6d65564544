"""Shared API conventions: errors with a machine-readable ``code``, and serializers that refuse
fields they do not declare (a verb's schema is a contract, not a suggestion)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import ServiceError

_CODES = {
    exceptions.NotAuthenticated: "unauthenticated",
    exceptions.AuthenticationFailed: "unauthenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.ParseError: "malformed_request",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid_request",
}


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"code": code, "message": message, "detail": detail if detail is not None else {}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.code, exc.message, exc.detail), status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for kind, c in _CODES.items() if isinstance(exc, kind)), "error")
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body(code, "the request is not valid; nothing was changed", response.data)
    else:
        message = str(getattr(exc, "detail", exc))
        response.data = error_body(code, message)
    return response


class StrictSerializer(serializers.Serializer[Any]):
    # Rejects unknown keys instead of silently ignoring them (a comment, not a docstring: docstrings
    # become schema descriptions, and every request body would inherit this one).

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class ErrorSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Machine-readable reason, e.g. not_found, stale_revision.")
    message = serializers.CharField()
    detail = serializers.JSONField()
