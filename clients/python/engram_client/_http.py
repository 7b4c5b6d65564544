"""What the sync and async clients share: the request each method sends, how an answer becomes a
result or an exception, and when a failed request is sent again."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from engram_client.errors import EngramError, error_for
from engram_client.types import (
    Ingested,
    Ledger,
    MessageIn,
    Reply,
    Round,
    Session,
    ToolFormat,
    Tools,
    Trace,
    Turn,
    VerbCall,
)

T = TypeVar("T")

#: The API's largest ingest batch (``history/apis.py`` ``MAX_BATCH``).
MAX_INGEST_BATCH = 500
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 3
#: The longest single wait between two tries, whatever ``Retry-After`` says.
DEFAULT_MAX_RETRY_WAIT = 30.0
USER_AGENT = "engram-client/0.1.0"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Any = None
    params: dict[str, str] | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: a request that answered 503, or 409 ``concurrent_update`` (both mean nothing
    was changed), or that could not connect at all, is sent again up to ``max_retries`` times, after
    ``Retry-After`` seconds when the server said so, else ``backoff * 2**try``; no wait exceeds
    ``max_wait``."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff: float = 0.5
    max_wait: float = DEFAULT_MAX_RETRY_WAIT

    def wait(self, attempt: int, error: EngramError) -> float | None:
        """Seconds to wait before try ``attempt + 1``, or None when the error is final."""
        if attempt >= self.max_retries or not retryable(error):
            return None
        wanted = error.retry_after if error.retry_after is not None else self.backoff * (2**attempt)
        return max(0.0, min(wanted, self.max_wait))


def retryable(error: EngramError) -> bool:
    return error.status == 503 or (error.status == 409 and error.code == "concurrent_update")


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def answer(response: httpx.Response) -> Any:
    """The JSON body of a 2xx answer; the matching :class:`EngramError` for any other."""
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = response.text
    if response.is_success:
        return body
    raise error_for(response.status_code, body, retry_after_seconds(response.headers.get("Retry-After")))


def headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json", "User-Agent": USER_AGENT}


def session_id_of(session: int | Session) -> int:
    return session.session_id if isinstance(session, Session) else int(session)


def batches(messages: Iterable[MessageIn], size: int) -> list[list[MessageIn]]:
    if not 1 <= size <= MAX_INGEST_BATCH:
        raise ValueError(f"batch_size must be between 1 and {MAX_INGEST_BATCH}")
    chunks: list[list[MessageIn]] = []
    for message in messages:
        if not chunks or len(chunks[-1]) >= size:
            chunks.append([])
        chunks[-1].append(message)
    return chunks


# --------------------------------------------------------------------------------------------------
# the requests, one function per endpoint
# --------------------------------------------------------------------------------------------------


def ingest_call(messages: Sequence[MessageIn]) -> Call[list[Ingested]]:
    return Call(
        "POST",
        "/api/v1/messages",
        lambda data: [Ingested.from_json(m) for m in data["messages"]],
        body={"messages": list(messages)},
    )


def open_session_call(
    conversation_id: int,
    *,
    requester_actor_id: int | None,
    kind: str,
    goal: str,
    parent_session_id: int | None,
) -> Call[Session]:
    body: dict[str, Any] = {"conversation_id": conversation_id, "kind": kind, "goal": goal}
    if requester_actor_id is not None:
        body["requester_actor_id"] = requester_actor_id
    if parent_session_id is not None:
        body["parent_session_id"] = parent_session_id
    return Call("POST", "/api/v1/sessions", Session.from_json, body=body)


def session_call(session_id: int) -> Call[Session]:
    return Call("GET", f"/api/v1/sessions/{int(session_id)}", Session.from_json)


def start_turn_call(session_id: int, inbound_message_id: int, loaded_message_ids: Sequence[int]) -> Call[Turn]:
    body = {"inbound_message_id": inbound_message_id, "loaded_message_ids": list(loaded_message_ids)}
    return Call("POST", f"/api/v1/sessions/{int(session_id)}/turns", Turn.from_json, body=body)


def turn_call(turn_id: int) -> Call[Turn]:
    return Call("GET", f"/api/v1/turns/{int(turn_id)}", Turn.from_json)


def round_call(turn_id: int, calls: Sequence[VerbCall]) -> Call[Round]:
    return Call("POST", f"/api/v1/turns/{int(turn_id)}/rounds", Round.from_json, body={"calls": list(calls)})


def ledger_call(turn_id: int) -> Call[Ledger]:
    return Call("GET", f"/api/v1/turns/{int(turn_id)}/ledger", Ledger.from_json)


def reply_call(turn_id: int, body: str, cited_ids: Sequence[str]) -> Call[Reply]:
    payload = {"body": body, "cited_ids": list(cited_ids)}
    return Call("POST", f"/api/v1/turns/{int(turn_id)}/reply", Reply.from_json, body=payload)


def trace_call(trace_id: int) -> Call[Trace]:
    return Call("GET", f"/api/v1/traces/{int(trace_id)}", Trace.from_json)


def tools_call(format: ToolFormat, turn_id: int | None) -> Call[Tools]:
    path = "/api/v1/tools" if turn_id is None else f"/api/v1/turns/{int(turn_id)}/tools"
    return Call("GET", path, Tools.from_json, params={"provider": format})
