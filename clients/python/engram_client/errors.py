"""Exceptions: one class per failure kind, each carrying the API's error body (``code``, ``message``,
``detail``) and the HTTP ``status``. Catch :class:`EngramError` for all of them.

A few codes have a class of their own because a runtime must react to them differently:
``reply_withheld`` (the pre-delivery recheck withheld the reply; the turn is closed, do not send it),
``claim_guard_failed`` (the reply claimed a memory change that did not commit; the turn has failed),
``round_limit`` and ``turn_closed``.
"""

from __future__ import annotations

from typing import Any


class EngramError(Exception):
    """Any failure the client reports. ``status`` is 0 for a failure with no HTTP answer."""

    status: int = 0

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        detail: Any = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        text = f"{code}: {message}" if code else message
        super().__init__(f"{text} {detail}" if detail else text)
        self.code = code
        self.message = message
        self.detail = detail if detail is not None else {}
        if status is not None:
            self.status = status
        #: Seconds the server asked to wait before trying again (``Retry-After``), when it said.
        self.retry_after = retry_after


class TransportError(EngramError):
    """No HTTP answer: the connection was refused or reset, or the request timed out."""


class ProtocolError(EngramError):
    """The client refused a call that would break the turn protocol (nothing was sent)."""


class AuthenticationError(EngramError):
    """401: no API key, or an unknown or revoked one."""

    status = 401


class PermissionDeniedError(EngramError):
    """403: authenticated, but not allowed."""

    status = 403


class NotFoundError(EngramError):
    """404: missing, or not visible from this agent (the two are indistinguishable on purpose)."""

    status = 404


class ValidationError(EngramError):
    """400, 413 or 422: the request was refused as it stands; nothing was changed."""

    status = 400


class ClaimGuardFailed(ValidationError):
    """422 ``claim_guard_failed``: the reply asserted a memory change that did not commit. The turn
    has failed; ``detail["claims"]`` names them and ``detail["ledger"]`` is what did commit."""

    status = 422


class ConflictError(EngramError):
    """409: the request collides with the state of the turn or of a concurrent request."""

    status = 409


class ConcurrentUpdate(ConflictError):
    """409 ``concurrent_update``: a concurrent transaction won; nothing was changed (retried for you)."""


class ReplyWithheld(ConflictError):
    """409 ``reply_withheld``: the pre-delivery recheck found that the destination audience or
    something the reply was built from changed. The turn is closed and the reply must not be sent;
    ``detail["reason"]`` says why."""


class RoundLimitReached(ConflictError):
    """409 ``round_limit``: the turn has used its rounds; write the reply."""


class TurnClosed(ConflictError):
    """409 ``turn_closed``: the turn is no longer open (delivered, failed or withheld)."""


class RateLimitedError(EngramError):
    """429: too many requests; ``retry_after`` says when to try again."""

    status = 429


class UnavailableError(EngramError):
    """503: the service or its database is unavailable (retried for you, then raised)."""

    status = 503


class ServerError(EngramError):
    """Any other 5xx."""

    status = 500


_BY_CODE: dict[str, type[EngramError]] = {
    "concurrent_update": ConcurrentUpdate,
    "reply_withheld": ReplyWithheld,
    "claim_guard_failed": ClaimGuardFailed,
    "round_limit": RoundLimitReached,
    "turn_closed": TurnClosed,
}
_BY_STATUS: dict[int, type[EngramError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: ValidationError,
    422: ValidationError,
    429: RateLimitedError,
    503: UnavailableError,
}


def error_for(status: int, body: Any, retry_after: float | None = None) -> EngramError:
    """The exception for an error answer: by its ``code`` when it has a class of its own, else by status."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code, message, detail = body["code"], str(body.get("message", "")), body.get("detail")
    else:
        code, message, detail = f"http_{status}", str(body)[:500] if body else f"HTTP {status}", None
    kind = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if kind is None:
        kind = ServerError if status >= 500 else ValidationError if 400 <= status < 500 else EngramError
    return kind(message, code=code, detail=detail, status=status, retry_after=retry_after)
