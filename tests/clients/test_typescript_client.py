"""The TypeScript client (``clients/typescript``) against a live server: its own tests, run with Node's
test runner (``node --test``) against pytest-django's live server with a fresh agent's API key, cover a
whole turn, the claim guard, a withheld reply, each error class with the API's code, retries after a
503's ``Retry-After`` (through a proxy the Node test starts), ingest batching and the tool definitions
in the OpenAI, Anthropic and Vercel AI SDK shapes. What they did is then read from the database.

The package itself: no runtime dependency, its two development dependencies pinned exactly, build
output and installed modules ignored by git."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from bench.harness.typescript_client import TYPESCRIPT
from history.models import Message, Turn
from memory.models import MemoryEntry
from tests.clients.conftest import Workspace


def node_test_files(client: Path) -> list[Path]:
    return sorted((client / "test").glob("*.test.mjs"))


def node_test(client: Path, workspace: Workspace) -> subprocess.CompletedProcess[str]:
    files = [str(p.relative_to(client)) for p in node_test_files(client)]
    env = {**os.environ, "ENGRAM_URL": workspace.base_url, "ENGRAM_API_KEY": workspace.key}
    return subprocess.run(
        ["node", "--test", "--test-reporter=tap", *files],
        cwd=client,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def tap_count(output: str, name: str) -> int:
    match = re.search(rf"^# {name} (\d+)$", output, re.M)
    assert match, f"no '# {name}' line in node's report:\n{output}"
    return int(match.group(1))


@pytest.mark.timeout(420)
def test_the_typescript_clients_tests_pass_against_a_live_server(typescript_client: Path, workspace: Workspace) -> None:
    done = node_test(typescript_client, workspace)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert tap_count(report, "fail") == 0, report
    # Every test the files declare ran and passed (none skipped or left as a todo).
    declared = sum(len(re.findall(r"^test\(", path.read_text(), re.M)) for path in node_test_files(typescript_client))
    assert declared >= 20 and tap_count(report, "pass") == declared, report

    # What the turns did, as the database holds it: delivered replies with their provenance, the
    # claim guard's failed turn and the withheld one; memories about Alice with her as their subject.
    states = list(Turn.objects.filter(session__agent=workspace.agent).values_list("state", flat=True))
    assert {"delivered", "failed", "withheld"} <= set(states)
    lisbon = MemoryEntry.objects.get(agent=workspace.agent, current_revision__body="Lives in Lisbon.")
    assert lisbon.current_revision is not None and lisbon.current_revision.subject is not None
    assert lisbon.current_revision.subject.external_id == "U2"
    cited = Message.objects.get(agent=workspace.agent, direction="outbound", body__startswith="Noted, you live in")
    assert cited.cited_revision_ids == [lisbon.current_revision_id]
    assert not Message.objects.filter(agent=workspace.agent, body="Noted your salary.").exists()


def test_the_package_has_no_runtime_dependency_and_pins_its_build_tools() -> None:
    package = json.loads((TYPESCRIPT / "package.json").read_text())
    assert package["name"] == "engram-client" and package["type"] == "module"
    assert "dependencies" not in package and "peerDependencies" not in package
    assert package["devDependencies"] == {"@types/node": "20.19.43", "typescript": "5.9.3"}
    assert package["engines"] == {"node": ">=20"}
    assert package["exports"]["."] == {"types": "./dist/index.d.ts", "import": "./dist/index.js"}
    lock = json.loads((TYPESCRIPT / "package-lock.json").read_text())
    assert lock["packages"][""]["devDependencies"] == package["devDependencies"]
    installed = {path for path in lock["packages"] if path}
    assert installed == {"node_modules/@types/node", "node_modules/typescript", "node_modules/undici-types"}
    assert all(lock["packages"][path].get("dev") for path in installed)


def test_build_output_and_installed_modules_are_not_tracked() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "clients/typescript/dist/index.js", "clients/typescript/node_modules/x"],
        cwd=TYPESCRIPT.parents[1],
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["clients/typescript/dist/index.js", "clients/typescript/node_modules/x"]
    tracked = subprocess.run(
        ["git", "ls-files", "clients/typescript"], cwd=TYPESCRIPT.parents[1], capture_output=True, text=True
    ).stdout.split()
    assert not [path for path in tracked if "/dist/" in path or "/node_modules/" in path]
