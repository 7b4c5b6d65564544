"""docs/typescript.md's "Connect an agent" example is run exactly as printed against a live server, so it
cannot rot: with Node as the page says (an ES module importing ``engram-client``), after type-checking it
as TypeScript with the client's declarations; it gets a delivered reply citing the memory it wrote."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from history.models import Turn
from tests.clients.conftest import Workspace

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "typescript.md"
README = ROOT / "README.md"


def connect_snippet(page: Path = DOCS) -> str:
    section = page.read_text().split("## Connect an agent", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```ts\n(.*?)```", section, re.S)
    assert match, "the Connect an agent section has a TypeScript example"
    return match.group(1)


def test_the_readme_shows_the_same_typescript_example() -> None:
    """The README's TypeScript snippet is the page's, so running the page's runs the README's verbatim."""
    assert connect_snippet(README) == connect_snippet(DOCS)


def project_with_the_client(folder: Path, client: Path) -> None:
    """A folder whose ``node_modules/engram-client`` is the checkout's client, as ``npm install
    <checkout>/clients/typescript`` leaves it (a link to the folder)."""
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "engram-client").symlink_to(client, target_is_directory=True)


@pytest.mark.timeout(300)
def test_the_docs_example_type_checks_and_gets_a_delivered_reply(
    typescript_client: Path, workspace: Workspace, tmp_path: Path
) -> None:
    code = connect_snippet()
    assert len(code.strip().splitlines()) <= 20
    project_with_the_client(tmp_path, typescript_client)

    (tmp_path / "connect.mts").write_text(code)
    checked = subprocess.run(
        [
            str(typescript_client / "node_modules" / ".bin" / "tsc"),
            *("--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext"),
            *("--types", "node", "--typeRoots", str(typescript_client / "node_modules" / "@types"), "connect.mts"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    (tmp_path / "connect.mjs").write_text(code)
    env = {**os.environ, "ENGRAM_URL": workspace.base_url, "ENGRAM_API_KEY": workspace.key}
    done = subprocess.run(["node", "connect.mjs"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^delivered \[ 'm:[0-9a-f]{8}' \]$", done.stdout, re.M), done.stdout
    assert "Participant {" in done.stdout and "speaking: true" in done.stdout  # the speaker was printed
    assert "remember" in done.stdout  # the ledger instruction was printed
    assert Turn.objects.get(session__agent=workspace.agent).state == "delivered"
