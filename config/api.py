"""Shared API conventions: errors with a machine-readable ``code``, and serializers that refuse
fields they do not declare (a verb's schema is a contract, not a suggestion).

Failures outside DRF's own exceptions get the same error body: a request body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` answers 413 ``request_too_large`` (Django would answer a bare 400);
a transaction PostgreSQL rolled back because it collided with a concurrent one (a deadlock or a
serialization failure) answers 409 ``concurrent_update`` with ``Retry-After``; and a database that
cannot be reached (restarting, connection lost), or that refuses a write because it is not the primary
(a node behind the write address still finishing its promotion, or stepping down, during a failover),
answers 503 ``database_unavailable`` with ``Retry-After``, instead of a 500 page. A key over its
request rate (accounts/throttling.py) answers 429 ``rate_limited`` with ``Retry-After``. Every write is
atomic, so a request that fails either way has committed nothing of the transaction it was in, and may
be sent again.

Hostile input stops here, before any service or query runs: request bodies take exactly the JSON type
each declared field has (``StrictSerializer``), every integer is bounded to its column's range (ids
from 1 to ``MAX_ID``, in path parameters too: ``IdConverter``), free-form JSON holds only what
PostgreSQL can store, and a pagination cursor this server did not issue answers 400
``invalid_cursor``. Each refusal is a 4xx with a machine-readable code and writes nothing.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DEFAULT_DB_ALIAS, InterfaceError, InternalError, OperationalError, connections
from django.db.models import QuerySet
from django.http import Http404
from rest_framework import exceptions, pagination, parsers, serializers
from rest_framework.request import Request
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
#: SQLSTATE 25006: a write sent to a PostgreSQL in recovery (a standby), or in a read-only transaction.
READ_ONLY_SQL_TRANSACTION = "25006"
#: The largest id the API takes (every primary key is a PostgreSQL bigint): a larger one is a 400 in a
#: body or query, a 404 in a path, never a failed query. The smallest is 1.
MAX_ID = 2**63 - 1

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
    if isinstance(exc, InternalError) and _sqlstate(exc) == READ_ONLY_SQL_TRANSACTION:
        # The write address led to a node that is not the primary (Patroni promotes or demotes it as
        # this runs). The primary is unavailable to this connection: it is closed when the request
        # ends, so the next request connects afresh to whichever node leads then.
        connections[DEFAULT_DB_ALIAS].close_at = time.monotonic()
        log.warning("database unavailable (not the primary): %s", exc)
        return Response(
            error_body("database_unavailable", "the database is unavailable; retry later"),
            status=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
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
    500: nesting deeper than Python's recursion limit, strings PostgreSQL cannot store (NUL characters,
    lone surrogates) and numbers too large for a double (``1e400`` parses as infinity, which ``jsonb``
    cannot hold) anywhere, free-form fields such as evidence details included."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as error:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from error
        problem = _unstorable(data)
        if problem:
            raise exceptions.ParseError(f"JSON parse error - {problem}")
        return data


def _unstorable(data: Any) -> str | None:
    """Why PostgreSQL could not store ``data``, or None."""
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
                return _BAD_STRING
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return _BAD_STRING
        elif isinstance(value, float) and not math.isfinite(value):
            return "numbers must be finite and fit a double"
    return None


_BAD_STRING = "strings must not contain NUL characters or lone surrogates"


# -- strict request serializers ---------------------------------------------------------------------

#: The JSON type each kind of field takes, most specific first. A request body is JSON, so a field
#: takes exactly its type: none of DRF's coercions ("5" or 5.5 to 5, 1 or "true" to True, 5 to "5").
#: An integer field also takes an integral number such as ``5.0``, as JSON Schema's ``integer`` does.
_JSON_TYPES: tuple[tuple[type[serializers.Field[Any, Any, Any, Any]], tuple[type, ...], str], ...] = (
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.DecimalField, (int, float), "a number"),
    (serializers.MultipleChoiceField, (list,), "a list"),
    (serializers.CharField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
    (serializers.DateField, (str,), "a string"),
    (serializers.TimeField, (str,), "a string"),
    (serializers.DurationField, (str,), "a string"),
    (serializers.ListField, (list,), "a list"),
    (serializers.DictField, (dict,), "an object"),
    (serializers.ListSerializer, (list,), "a list"),
    (serializers.Serializer, (dict,), "an object"),
)


def _expected_type(field: serializers.Field[Any, Any, Any, Any]) -> tuple[tuple[type, ...], str] | None:
    if isinstance(field, serializers.ChoiceField) and not isinstance(field, serializers.MultipleChoiceField):
        # TextChoices members are str subclasses: what JSON can carry is their base type.
        kinds = {next((t for t in (bool, int, float, str) if isinstance(c, t)), type(c)) for c in field.choices}
        kinds = kinds or {str}
        if kinds == {str}:
            return (str,), "a string"
        return tuple(kinds), "one of the choices"
    for kind, types, label in _JSON_TYPES:
        if isinstance(field, kind):
            return types, label
    return None  # JSONField and free-form children take any JSON value


def json_type_errors(field: serializers.Field[Any, Any, Any, Any], value: Any) -> Any:
    """Why the parsed JSON ``value`` is not of ``field``'s JSON type, in DRF's error shape (a list of
    messages, or per index or key for the children of a list or object), or None if it is. ``null``
    is left to the field (``allow_null``); nested serializers check their own fields."""
    expected = _expected_type(field)
    if value is None or expected is None:
        return None
    types, label = expected
    integral = isinstance(field, serializers.IntegerField) and isinstance(value, float) and value.is_integer()
    if (isinstance(value, bool) and bool not in types) or not (isinstance(value, types) or integral):
        return [f"must be {label}"]
    child = getattr(field, "child", None)
    if child is None or isinstance(field, serializers.BaseSerializer):
        return None
    items = enumerate(value) if isinstance(value, list) else value.items()
    errors = {key: error for key, item in items if (error := json_type_errors(child, item)) is not None}
    return errors or None


class StrictSerializer(serializers.Serializer[Any]):
    # A request body's schema: unknown keys are refused instead of silently ignored, and each declared
    # field takes exactly its JSON type (json_type_errors), list and object children included. Comments,
    # not a docstring: docstrings become schema descriptions, and every request body would inherit it.

    #: Whether values arrive as parsed JSON (a body) rather than as text (a query string).
    json_types = True

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
            if self.json_types:
                errors = {}
                for name, value in data.items():
                    error = json_type_errors(self.fields[name], value)
                    if error is not None:
                        errors[name] = error
                if errors:
                    raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class StrictQuerySerializer(StrictSerializer):
    # Query parameters: unknown names are refused; every value is text, which each field parses
    # (so ``?page_size=5`` is an integer), within the same bounds a body's field has.

    json_types = False


class IdConverter:
    """``<id:name>`` in a route: a row id from 1 to ``MAX_ID``. Anything else (0, a number past bigint,
    a sign) matches no route, so it answers 404 like a missing row and never reaches PostgreSQL. The
    schema publishes the same bounds (``PATH_CONVERTER_OVERRIDES`` in the settings)."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if not 1 <= number <= MAX_ID:
            raise ValueError(f"not an id: {value}")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


# -- pagination --------------------------------------------------------------------------------------


class StrictCursorPagination(pagination.CursorPagination):
    """Cursor pagination that refuses a cursor it did not issue, before any query: 400 ``invalid_cursor``.

    DRF answers an undecodable cursor 404, as if a page were missing, and hands a decodable but forged
    position to PostgreSQL, where a position that is not of the ordering column's type fails the query.
    Here the position must parse as that column's type (and hold no NUL)."""

    #: The ordering's first column, whose type a cursor's position must parse as.
    position_field: Any = None

    def paginate_queryset(self, queryset: QuerySet[Any], request: Request, view: Any = None) -> list[Any] | None:
        ordering = self.get_ordering(request, queryset, view)
        self.position_field = queryset.model._meta.get_field(ordering[0].lstrip("-"))
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Request) -> pagination.Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        try:
            # DRF's decoding skips characters outside base64, so "%%%" would read as the first page.
            if encoded is not None:
                base64.b64decode(encoded.encode("ascii"), validate=True)
            cursor = super().decode_cursor(request)
        except (ValueError, exceptions.NotFound) as error:
            raise invalid_cursor() from error
        # The stubs type a position as int; DRF decodes it from the query string, so it is text.
        position: str | None = None if cursor is None else cursor.position  # type: ignore[assignment]
        if position is not None:
            if "\x00" in position:
                raise invalid_cursor()
            try:
                self.position_field.to_python(position)
            except DjangoValidationError as error:
                raise invalid_cursor() from error
        return cursor


def invalid_cursor() -> ServiceError:
    return ServiceError(
        "the cursor is not one this API issued; start from the first page; nothing was changed", code="invalid_cursor"
    )


class ErrorSerializer(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="Machine-readable reason, e.g. not_found, stale_revision.")
    message = serializers.CharField()
    detail = serializers.JSONField()
