"""The client is a package of its own: it installs beside Engram, imports without Django, and pins httpx."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"


def test_the_client_imports_without_django() -> None:
    code = "import sys, engram_client; print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_client_depends_on_httpx_only_pinned_exactly() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "engram-client"
    assert project["dependencies"] == ["httpx==0.28.1"]


def test_a_build_left_by_installing_the_client_is_not_type_checked(tmp_path: Path, monkeypatch: Any) -> None:
    """``pip install "./clients/python[mcp]"`` (docs/mcp.md) builds in the source tree, leaving a second
    engram_client under clients/python/build/lib and an .egg-info beside it. mypy's file discovery, with
    the project's configuration, skips both, so ``mypy .`` sees the package once (no "Duplicate module
    named engram_client"). Discovery only, on a copy of that layout: no type checking, nothing written
    to the checkout."""
    from mypy.main import process_options

    for package in ("engram_client", "build/lib/engram_client"):
        (tmp_path / "clients" / "python" / package).mkdir(parents=True)
        (tmp_path / "clients" / "python" / package / "__init__.py").write_text("VERSION = 1\n")
    (tmp_path / "clients" / "python" / "engram_client.egg-info").mkdir()
    (tmp_path / "clients" / "python" / "engram_client.egg-info" / "top_level.py").write_text("")
    shutil.copy(CLIENT.parents[1] / "pyproject.toml", tmp_path / "pyproject.toml")
    monkeypatch.chdir(tmp_path)

    sources, _ = process_options([".", "--config-file", "pyproject.toml"])

    found = sorted(Path(source.path).as_posix() for source in sources if source.path)
    assert found == ["clients/python/engram_client/__init__.py"]


def test_every_extra_is_pinned_exactly() -> None:
    """The mcp server's SDK and each framework integration's packages are optional, and pinned."""
    extras = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"mcp", "pydantic-ai", "openai-agents", "langgraph"} <= set(extras)
    for requirements in extras.values():
        assert all("==" in requirement for requirement in requirements), requirements


def test_the_client_and_its_integrations_package_import_no_framework() -> None:
    """A framework is imported by its own integration module only, so the plain client needs none."""
    code = (
        "import sys, engram_client, engram_client.integrations; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'pydantic_ai', 'agents', 'langgraph', 'langchain_core', 'mcp'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
