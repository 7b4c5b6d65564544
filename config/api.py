"""Shared API conventions: errors with a machine-readable ``code``, and serializers that refuse
fields they do not declare (a verb's schema is a contract, not a suggestion).

Failures outside DRF's own exceptions get the same error body: a request body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers 413 ``request_too_large`` (Django would answer a bare 400);
a transaction PostgreSQL rolled back because it collided with a concurrent one (a deadlock or a
serialization failure) answers 409 ``concurrent_update`` with ``Retry-After``; and a database that
cannot be reached (restarting, connection lost) answers 503 ``database_unavailable`` with
``Retry-After``, instead of a 500 page. A key over its request rate (accounts/throttling.py) answers
429 ``rate_limited`` with ``Retry-After``. Every write is atomic, so a request that fails either way has
committed nothing of the transaction it was in, and may be sent again.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, parsers, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import ServiceError

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying when the database is unavailable.
DATABASE_RETRY_AFTER_S = 5
#: Seconds before retrying a request whose transaction lost to a concurrent one.
CONFLICT_RETRY_AFTER_S = 1
#: SQLSTATE class 40, "transaction rollback": deadlock detected, serialization failure and the like.
TRANSACTION_ROLLBACK_CLASS = "40"

_CODES = {
    exceptions.NotAuthenticated: "unauthenticated",
    exceptions.AuthenticationFailed: "unauthenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.ParseError: "malformed_request",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.Throttled: "rate_limited",
    exceptions.ValidationError: "invalid_request",
}


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"code": code, "message": message, "detail": detail if detail is not None else {}}


def _sqlstate(exc: Exception) -> str:
    """The SQLSTATE of the driver error Django wrapped, if any."""
    return str(getattr(exc.__cause__, "sqlstate", None) or "")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.code, exc.message, exc.detail), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("request_too_large", "the request body is too large; nothing was changed"), status=413
        )
    if isinstance(exc, OperationalError) and _sqlstate(exc).startswith(TRANSACTION_ROLLBACK_CLASS):
        log.warning("transaction rolled back by a concurrent one: %s", exc)
        return Response(
            error_body("concurrent_update", "a concurrent request changed the same rows; nothing was changed, retry"),
            status=409,
            headers={"Retry-After": str(CONFLICT_RETRY_AFTER_S)},
        )
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("database unavailable: %s", exc)
        return Response(
            error_body("database_unavailable", "the database is unavailable; retry later"),
            status=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
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
    elif isinstance(exc, exceptions.Throttled):
        # DRF has set Retry-After from the throttle's wait (accounts/throttling.py); the body says it too.
        seconds: float | None = getattr(exc, "wait", None)
        wait = None if seconds is None else math.ceil(seconds)
        response.data = error_body(
            code, "too many requests with this API key; nothing was changed, retry later", {"retry_after_s": wait}
        )
    else:
        message = str(getattr(exc, "detail", exc))
        response.data = error_body(code, message)
    return response


class SafeJSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing with 400 ``malformed_request`` what would otherwise fail later as a
    500: nesting deeper than Python's recursion limit, and strings PostgreSQL cannot store (NUL
    characters, lone surrogates) anywhere, free-form fields such as evidence details included."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from error
        if not _storable(data):
            raise exceptions.ParseError("JSON parse error - strings must not contain NUL characters or lone surrogates")
        return data


def _storable(data: Any) -> bool:
    pending = [data]
    while pending:  # iterative: the depth is already bounded by the parser, the breadth by the body size
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            if "\x00" in value:
                return False
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


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
