"""An agent runtime using ``engram_client`` against a live Engram (pytest-django's ``live_server``:
a real HTTP server on the test database, real PostgreSQL): an agent with an API key, a Slack
workspace with Victor and Alice, ingested through the client itself. The TypeScript client
(``clients/typescript``) is built once a session for the tests that run it with Node."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import re
import shutil
import subprocess
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


TYPESCRIPT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
#: The oldest Node.js the TypeScript client supports (its package.json's ``engines``).
NODE_MAJOR = 20


def _npm(*args: str) -> None:
    done = subprocess.run(["npm", *args], cwd=TYPESCRIPT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        command = " ".join(args)
        pytest.fail(f"npm {command} failed in {TYPESCRIPT} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def typescript_client() -> Path:
    """``clients/typescript`` built into its ``dist/``: ``npm ci`` when ``node_modules`` was not installed
    from the current lockfile, ``npm run build`` when ``dist/`` was not built from the current sources
    (stamps record the digests). A missing or too old Node.js fails the test, saying so: the client's
    tests must not pass without running. Another pytest process on the same checkout (the lexical-only
    pass) waits on a lock meanwhile, then finds both up to date, so nothing is rewritten under a run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail(
            f"the TypeScript client's tests need Node.js >= {NODE_MAJOR} and npm on PATH (Debian: apt-get install "
            "nodejs npm); none found"
        )
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < NODE_MAJOR:
        pytest.fail(f"the TypeScript client needs Node.js >= {NODE_MAJOR}; found {version}")
    installed = _digest([TYPESCRIPT / "package-lock.json"])
    built = _digest([TYPESCRIPT / "package-lock.json", TYPESCRIPT / "tsconfig.json", *(TYPESCRIPT / "src").rglob("*")])
    installed_stamp = TYPESCRIPT / "node_modules" / ".engram-lockfile.sha256"
    built_stamp = TYPESCRIPT / "dist" / ".engram-sources.sha256"
    with (TYPESCRIPT / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _stamped(installed_stamp, installed):
            _npm("ci", "--no-audit", "--no-fund")
            installed_stamp.write_text(installed)
        if not _stamped(built_stamp, built):
            shutil.rmtree(TYPESCRIPT / "dist", ignore_errors=True)
            _npm("run", "build")
            built_stamp.write_text(built)
    return TYPESCRIPT


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in paths if p.is_file()):
        digest.update(str(path.relative_to(TYPESCRIPT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _stamped(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == digest
