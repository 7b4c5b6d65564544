"""Bounded automatic retries: a 503, or a 409 ``concurrent_update`` (both promise nothing was
changed), is sent again after ``Retry-After`` seconds, up to ``max_retries`` times; any other error,
a 409 ``reply_withheld`` included, is raised at once.

The failures come from a real HTTP proxy in front of the live server that answers the first requests
itself, in the API's error shape, and forwards the rest; what reached Engram is read from the database.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from engram_client import AsyncEngram, Engram, ReplyWithheld, UnavailableError

from history.models import Message
from tests.clients.conftest import Workspace, run_async


@dataclass
class Proxy:
    url: str
    #: (status, code, Retry-After or None) answered to the next requests, in order.
    failures: list[tuple[int, str, str | None]] = field(default_factory=list)
    #: The time each request arrived, and whether it was forwarded.
    seen: list[tuple[float, bool]] = field(default_factory=list)


@pytest.fixture
def proxy(workspace: Workspace) -> Iterator[Proxy]:
    upstream = workspace.base_url
    state = Proxy(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if state.failures:
                status, code, retry_after = state.failures.pop(0)
                state.seen.append((time.monotonic(), False))
                payload = json.dumps({"code": code, "message": "injected", "detail": {}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.end_headers()
                self.wfile.write(payload)
                return
            state.seen.append((time.monotonic(), True))
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
            answer = httpx.request(self.command, upstream + self.path, content=body, headers=headers)
            self.send_response(answer.status_code)
            for name in ("Content-Type", "Retry-After"):
                if name in answer.headers:
                    self.send_header(name, answer.headers[name])
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_and_a_concurrent_update_are_retried_and_the_write_lands_once(workspace: Workspace, proxy: Proxy) -> None:
    proxy.failures = [(503, "database_unavailable", "0"), (409, "concurrent_update", "0")]
    with Engram(proxy.url, workspace.key) as engram:
        (ingested,) = engram.ingest([workspace.message("general", "U1", "Deploys are on Tuesdays.")])
    assert [forwarded for _, forwarded in proxy.seen] == [False, False, True]
    assert Message.objects.filter(pk=ingested.message_id).count() == 1


def test_retry_after_is_honoured(workspace: Workspace, proxy: Proxy) -> None:
    """The second try is not sent before the ``Retry-After`` the 503 named."""
    proxy.failures = [(503, "database_unavailable", "1")]
    with Engram(proxy.url, workspace.key) as engram:
        engram.ingest([workspace.message("general", "U1", "hello")])
    (first, _), (second, _) = proxy.seen
    assert second - first >= 1.0


def test_retries_are_bounded_then_the_error_is_raised(workspace: Workspace, proxy: Proxy) -> None:
    proxy.failures = [(503, "database_unavailable", "0")] * 5
    with pytest.raises(UnavailableError) as failed, Engram(proxy.url, workspace.key, max_retries=2) as engram:
        engram.ingest([workspace.message("general", "U1", "hello")])
    assert failed.value.code == "database_unavailable" and failed.value.retry_after == 0
    assert len(proxy.seen) == 3 and not Message.objects.exists()


def test_other_conflicts_are_not_retried(workspace: Workspace, proxy: Proxy) -> None:
    """A withheld reply is final: sending it again could only be refused, so it is raised at once."""
    proxy.failures = [(409, "reply_withheld", None), (409, "reply_withheld", None)]
    with pytest.raises(ReplyWithheld), Engram(proxy.url, workspace.key) as engram:
        engram.submit_reply(1, "hello")
    assert len(proxy.seen) == 1


def test_the_async_client_retries_alike(workspace: Workspace, proxy: Proxy) -> None:
    proxy.failures = [(503, "database_unavailable", "0"), (409, "concurrent_update", None)]

    async def ingest() -> int:
        async with AsyncEngram(proxy.url, workspace.key) as engram:
            (ingested,) = await engram.ingest([workspace.message("general", "U1", "hello")])
            return ingested.message_id

    message_id = run_async(ingest())
    assert [forwarded for _, forwarded in proxy.seen] == [False, False, True]
    assert Message.objects.filter(pk=message_id).exists()
