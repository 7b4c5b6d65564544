"""``Engram`` (sync) and ``AsyncEngram`` (async): the same methods, one per API endpoint, plus
``ingest`` batching and the ``turn`` helper. Every call is bound to the agent of the API key; no
method takes an agent, audience or perspective."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TypeVar

import httpx

from engram_client import _http
from engram_client._http import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, MAX_INGEST_BATCH, Call, RetryPolicy
from engram_client.errors import EngramError, TransportError
from engram_client.turn import AsyncTurnSession, TurnSession
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


def _transport_error(error: httpx.TransportError) -> TransportError:
    return TransportError(str(error) or type(error).__name__, code="no_answer")


def _connect_failed(error: httpx.TransportError) -> bool:
    """Only a request that never reached the server may be sent again: a timeout after sending may
    have committed."""
    return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)


class Engram:
    """A sync client of one Engram server for one agent (its API key).

    ``base_url``: e.g. ``http://127.0.0.1:8000``. ``max_retries``: tries after the first for 503 and
    409 ``concurrent_update`` answers (and refused connections). ``http_client``: an ``httpx.Client``
    of your own (its base URL and headers are left alone; the key is sent on every request).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = _http.DEFAULT_MAX_RETRY_WAIT,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = RetryPolicy(max_retries=max_retries, max_wait=max_retry_wait)
        self._headers = _http.headers(api_key)
        self._owns_client = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._owns_client:
            self._http.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method, self.base_url + call.path, json=call.body, params=call.params, headers=self._headers
                )
                return call.parse(_http.answer(response))
            except httpx.TransportError as failure:
                error: EngramError = _transport_error(failure)
                if not _connect_failed(failure) or attempt >= self.retry.max_retries:
                    raise error from failure
                wait = self.retry.backoff * (2**attempt)
            except EngramError as failure:
                retry = self.retry.wait(attempt, failure)
                if retry is None:
                    raise
                wait = retry
            time.sleep(wait)
            attempt += 1

    # -- ingest ------------------------------------------------------------------------------------

    def ingest(self, messages: Iterable[MessageIn], *, batch_size: int = MAX_INGEST_BATCH) -> list[Ingested]:
        """Ingest messages as a connector saw them, ``batch_size`` (at most 500) a request, in order.
        Each batch is atomic on the server; a repeated external id creates nothing new, so a batch
        that failed may be sent again."""
        results: list[Ingested] = []
        for chunk in _http.batches(messages, batch_size):
            batch: list[Ingested] = self._run(_http.ingest_call(chunk))
            results.extend(batch)
        return results

    # -- sessions and turns ------------------------------------------------------------------------

    def open_session(
        self,
        conversation_id: int,
        *,
        requester_actor_id: int | None = None,
        kind: str = "interactive",
        goal: str = "",
        parent_session_id: int | None = None,
    ) -> Session:
        """Open a session and take its frozen snapshot (put ``snapshot_block`` in the cacheable prefix)."""
        return self._run(
            _http.open_session_call(
                conversation_id,
                requester_actor_id=requester_actor_id,
                kind=kind,
                goal=goal,
                parent_session_id=parent_session_id,
            )
        )

    def session(self, session_id: int) -> Session:
        return self._run(_http.session_call(session_id))

    def start_turn(
        self, session: int | Session, inbound_message_id: int, loaded_message_ids: Sequence[int] = ()
    ) -> Turn:
        """Start a turn (the low-level call; prefer :meth:`turn`)."""
        return self._run(_http.start_turn_call(_http.session_id_of(session), inbound_message_id, loaded_message_ids))

    def get_turn(self, turn_id: int) -> Turn:
        return self._run(_http.turn_call(turn_id))

    def run_round(self, turn_id: int, calls: Sequence[VerbCall]) -> Round:
        """One round of verb calls; all are validated before any executes."""
        return self._run(_http.round_call(turn_id, calls))

    def ledger(self, turn_id: int) -> Ledger:
        return self._run(_http.ledger_call(turn_id))

    def submit_reply(self, turn_id: int, body: str, cited_ids: Sequence[str] = ()) -> Reply:
        """Submit the final reply (the low-level call; prefer ``turn.reply``)."""
        return self._run(_http.reply_call(turn_id, body, cited_ids))

    def trace(self, trace_id: int) -> Trace:
        return self._run(_http.trace_call(trace_id))

    def tools(self, format: ToolFormat = "openai", *, turn_id: int | None = None) -> Tools:
        """The verbs and ``search_history`` as tool definitions for a model (``openai`` or ``anthropic``).
        With ``turn_id``, bound to that turn: empty once it has no round left."""
        return self._run(_http.tools_call(format, turn_id))

    def turn(
        self,
        session: int | Session,
        inbound_message_id: int,
        loaded_message_ids: Sequence[int] = (),
        *,
        max_rounds: int | None = None,
    ) -> TurnSession:
        """A turn kept to the protocol; see :mod:`engram_client.turn`::

        with engram.turn(session, inbound_id) as turn:
            turn.round([{"verb": "recall", "query": "..."}])
            turn.ledger()
            turn.reply("...")
        """
        return TurnSession(
            self, _http.session_id_of(session), inbound_message_id, loaded_message_ids, max_rounds=max_rounds
        )


class AsyncEngram:
    """The async twin of :class:`Engram` (same arguments, same methods, awaited)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = _http.DEFAULT_MAX_RETRY_WAIT,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = RetryPolicy(max_retries=max_retries, max_wait=max_retry_wait)
        self._headers = _http.headers(api_key)
        self._owns_client = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, self.base_url + call.path, json=call.body, params=call.params, headers=self._headers
                )
                return call.parse(_http.answer(response))
            except httpx.TransportError as failure:
                error: EngramError = _transport_error(failure)
                if not _connect_failed(failure) or attempt >= self.retry.max_retries:
                    raise error from failure
                wait = self.retry.backoff * (2**attempt)
            except EngramError as failure:
                retry = self.retry.wait(attempt, failure)
                if retry is None:
                    raise
                wait = retry
            await asyncio.sleep(wait)
            attempt += 1

    async def ingest(self, messages: Iterable[MessageIn], *, batch_size: int = MAX_INGEST_BATCH) -> list[Ingested]:
        results: list[Ingested] = []
        for chunk in _http.batches(messages, batch_size):
            batch: list[Ingested] = await self._run(_http.ingest_call(chunk))
            results.extend(batch)
        return results

    async def open_session(
        self,
        conversation_id: int,
        *,
        requester_actor_id: int | None = None,
        kind: str = "interactive",
        goal: str = "",
        parent_session_id: int | None = None,
    ) -> Session:
        return await self._run(
            _http.open_session_call(
                conversation_id,
                requester_actor_id=requester_actor_id,
                kind=kind,
                goal=goal,
                parent_session_id=parent_session_id,
            )
        )

    async def session(self, session_id: int) -> Session:
        return await self._run(_http.session_call(session_id))

    async def start_turn(
        self, session: int | Session, inbound_message_id: int, loaded_message_ids: Sequence[int] = ()
    ) -> Turn:
        return await self._run(
            _http.start_turn_call(_http.session_id_of(session), inbound_message_id, loaded_message_ids)
        )

    async def get_turn(self, turn_id: int) -> Turn:
        return await self._run(_http.turn_call(turn_id))

    async def run_round(self, turn_id: int, calls: Sequence[VerbCall]) -> Round:
        return await self._run(_http.round_call(turn_id, calls))

    async def ledger(self, turn_id: int) -> Ledger:
        return await self._run(_http.ledger_call(turn_id))

    async def submit_reply(self, turn_id: int, body: str, cited_ids: Sequence[str] = ()) -> Reply:
        return await self._run(_http.reply_call(turn_id, body, cited_ids))

    async def trace(self, trace_id: int) -> Trace:
        return await self._run(_http.trace_call(trace_id))

    async def tools(self, format: ToolFormat = "openai", *, turn_id: int | None = None) -> Tools:
        return await self._run(_http.tools_call(format, turn_id))

    def turn(
        self,
        session: int | Session,
        inbound_message_id: int,
        loaded_message_ids: Sequence[int] = (),
        *,
        max_rounds: int | None = None,
    ) -> AsyncTurnSession:
        """``async with engram.turn(session, inbound_id) as turn: ...`` (see :meth:`Engram.turn`)."""
        return AsyncTurnSession(
            self, _http.session_id_of(session), inbound_message_id, loaded_message_ids, max_rounds=max_rounds
        )


__all__ = ["AsyncEngram", "Engram"]
