"""The client is a package of its own: it installs beside Engram, imports without Django, and pins httpx."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"


def test_the_client_imports_without_django() -> None:
    code = "import sys, engram_client; print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_client_depends_on_httpx_only_pinned_exactly() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "engram-client"
    assert project["dependencies"] == ["httpx==0.28.1"]
