"""An agent runtime using ``engram_client`` against a live Engram (pytest-django's ``live_server``:
a real HTTP server on the test database, real PostgreSQL): an agent with an API key, a Slack
workspace with Victor and Alice, ingested through the client itself. The TypeScript client
(``clients/typescript``) is built once a session for the tests that run it with Node."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from engram_client import Engram, MessageIn
from engram_client.types import Audience

from accounts.models import RuntimeAgent
from accounts.services import api_key_create
from bench.harness.typescript_client import ClientUnavailable
from bench.harness.typescript_client import build as typescript_client_build
from tests.factories import AgentFactory

T = TypeVar("T")
NAMES = {"U1": "Victor", "U2": "Alice"}
DM_ALICE: Audience = {"kind": "members", "readers": ["U2"]}
GENERAL: Audience = {"kind": "workspace"}


@dataclass
class Workspace:
    """The agent, its key and a counter for fresh message ids."""

    agent: RuntimeAgent
    base_url: str
    key: str
    counter: list[int] = field(default_factory=lambda: [0])

    def message(self, thread: str, who: str, body: str, audience: Audience | None = None) -> MessageIn:
        self.counter[0] += 1
        n = self.counter[0]
        return {
            "connector": {"type": "slack", "name": "acme"},
            "thread": {"external_id": thread, "audience": audience or (DM_ALICE if thread == "D-ALICE" else GENERAL)},
            "actor": {"external_id": who, "display_name": NAMES[who]},
            "external_id": f"ts-{n}",
            "body": body,
            "created_at": f"2026-11-30T09:{n // 60:02d}:{n % 60:02d}Z",
            "evidence": {"method": "connector_signed"},
        }

    def client(self, **options: Any) -> Engram:
        return Engram(self.base_url, self.key, **options)


@pytest.fixture
def workspace(transactional_db: None, live_server: Any) -> Workspace:
    agent = AgentFactory.create()
    return Workspace(agent=agent, base_url=live_server.url, key=api_key_create(agent=agent).secret)


@pytest.fixture
def engram(workspace: Workspace) -> Iterator[Engram]:
    with workspace.client() as client:
        yield client


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a thread of its own: Playwright's sync API (the browser tests) keeps an event
    loop on the main thread, where ``asyncio.run`` refuses to start another."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="session")
def typescript_client() -> Path:
    """``clients/typescript`` built (:func:`bench.harness.typescript_client.build`: ``npm ci`` and the build,
    each only when out of date). A missing or too old Node.js fails the test, saying so: the client's
    tests must not pass without running."""
    try:
        return typescript_client_build()
    except ClientUnavailable as missing:
        pytest.fail(str(missing))
