"""docs/integrations.md cannot drift from the code: its snippets compile and import what the client
exports, and its table names the extras, pins and modules the client's pyproject declares."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "integrations.md"


def test_every_snippet_compiles_and_imports_what_the_client_exports() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3
    for block in blocks:
        tree = compile(block, str(DOC), "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engram_client"):
                module = importlib.import_module(str(node.module))
                assert all(hasattr(module, alias.name) for alias in node.names), ast.unparse(node)


def test_the_table_matches_the_extras_and_modules() -> None:
    extras = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    rows = re.findall(r"^\| [^|]+ \| `([a-z-]+)` \| `([a-z_.]+)` \| (.+) \|$", DOC.read_text(), re.M)
    assert [extra for extra, _, _ in rows] == ["pydantic-ai", "openai-agents", "langgraph"]
    for extra, module, pins in rows:
        assert re.findall(r"`([^`]+)`", pins) == extras["optional-dependencies"][extra]
        importlib.import_module(module)
