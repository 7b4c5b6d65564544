"""The README's "Connect an agent" example is run exactly as printed against a live server, so it
cannot rot: at most 20 lines, and it gets a delivered reply citing the memory it wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from history.models import Turn
from tests.clients.conftest import Workspace

README = Path(__file__).resolve().parents[2] / "README.md"


def connect_snippet() -> str:
    section = README.read_text().split("## Connect an agent", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the Connect an agent section has a Python example"
    return match.group(1)


def test_the_readme_example_gets_a_delivered_reply(workspace: Workspace) -> None:
    code = connect_snippet()
    assert len(code.strip().splitlines()) <= 20
    env = {**os.environ, "ENGRAM_URL": workspace.base_url, "ENGRAM_API_KEY": workspace.key}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^delivered \['m:[0-9a-f]{8}'\]$", done.stdout, re.M), done.stdout
    assert "remember" in done.stdout  # the ledger instruction was printed
    assert Turn.objects.get(session__agent=workspace.agent).state == "delivered"
