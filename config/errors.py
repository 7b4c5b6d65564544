"""Errors a service raises when it refuses a request. Each carries a machine-readable ``code`` and the
HTTP status the API answers with; a service that raises one has written nothing."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, code: str | None = None, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.detail = detail or {}


class Forbidden(ServiceError):
    """The credential is valid but may not call this operation (an API key without the scope it needs).
    Never for a row of another perspective: that answers ``NotFound``, like a missing one."""

    status = 403
    code = "forbidden"


class NotFound(ServiceError):
    """Missing, or not visible from this perspective: the two are indistinguishable on purpose."""

    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class Unprocessable(ServiceError):
    status = 422
    code = "unprocessable"
