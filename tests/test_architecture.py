"""Dependencies flow one way: each layer imports only from its own layer or the layers below it, and
no project module imports itself back through others (docs/architecture.md draws the layers).

The import graph is read from the source with ``ast``: every ``import`` and ``from … import`` of a
project module, at module level or inside a function (a deferred import is still a dependency), in
every Python file of the project's packages, migrations included.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A module may import from its own layer and the layers before it, never after.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # settings, the database backend and row plumbing, errors, audit, replica routing, Celery
    ("config", ("config",)),
    ("accounts", ("accounts",)),
    # conversations, messages, turns; the audience and provenance rule every reader shares
    ("history", ("history",)),
    # memories, grants, embeddings, eligibility, recall and history search, the turn protocol
    ("memory", ("memory",)),
    # the pages people see, over memory's selectors and services
    ("pages", ("pages",)),
    ("demo", ("demo",)),
    ("bench", ("bench",)),
    # the URL map, which mounts every app's views: the one place allowed to import them all
    ("wiring", ("config.urls",)),
)
#: Folders at the top of the repository that hold no project code of this graph.
NOT_PROJECT = {"tests"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the project module imported
    where: str  # path:line


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in sorted(p.parent for p in ROOT.glob("*/__init__.py")):
        if package.name in NOT_PROJECT:
            continue
        for path in sorted(package.rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """Every dotted name ``path`` imports, relative imports resolved, with its line."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = ".".join([*package[: len(package) - drop], *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            # ``from a import b`` imports the module a.b when there is one, else a name of module a.
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
            yield base, node.lineno


def import_graph() -> list[Import]:
    modules = project_modules()
    imports = []
    for module, path in modules.items():
        for name, line in imported_names(path, module):
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                imports.append(Import(module, target, f"{path.relative_to(ROOT)}:{line}"))
    return list(dict.fromkeys(imports))


def layer_of(module: str) -> int:
    """The index of the layer holding ``module``: the most specific prefix that names it."""
    best, best_length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of nodes that reach one another (Tarjan), of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def cycle_report(
    imports: list[Import], node_of: dict[str, str], closes: Callable[[Import], bool] = lambda imp: True
) -> list[str]:
    """Each cycle between nodes (``node_of`` maps a module to its node), with the imports inside it that
    ``closes`` picks out as the ones to look at."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        if node_of[imp.source] != node_of[imp.target]:
            edges[node_of[imp.source]].add(node_of[imp.target])
    lines = []
    for group in strongly_connected(edges):
        lines.append(f"cycle between {', '.join(group)}:")
        members = set(group)
        lines += [
            f"  {imp.where}: {imp.source} imports {imp.target}"
            for imp in imports
            if node_of[imp.source] in members
            and node_of[imp.target] in members
            and node_of[imp.source] != node_of[imp.target]
            and closes(imp)
        ]
    return lines


def test_every_project_package_has_a_layer():
    """A new top-level package is placed in a layer before its imports are allowed anywhere."""
    unplaced = sorted({m.split(".")[0] for m in project_modules() if layer_of(m) < 0})
    assert not unplaced, f"packages in no layer of LAYERS: {unplaced}"


def test_imports_only_point_down_the_layers():
    """No module imports a module of a higher layer: product code never imports bench or demo, history
    never imports memory, accounts never imports history, the settings never import an app."""
    names = [name for name, _ in LAYERS]
    against = [
        f"{imp.where}: {imp.source} ({names[layer_of(imp.source)]}) imports {imp.target} "
        f"({names[layer_of(imp.target)]})"
        for imp in import_graph()
        if layer_of(imp.target) > layer_of(imp.source)
    ]
    assert not against, "imports against the layers' direction:\n" + "\n".join(against)


def test_no_cycle_between_layers():
    """No two layers (each a top-level package, the URL map apart from the rest of config) import each
    other, directly or through others."""
    imports = import_graph()
    names = [name for name, _ in LAYERS]
    node_of = {m: names[layer_of(m)] for imp in imports for m in (imp.source, imp.target)}
    # The imports that point up the layers are the ones closing the cycle.
    report = cycle_report(imports, node_of, closes=lambda imp: layer_of(imp.target) > layer_of(imp.source))
    assert not report, "\n".join(report)


def test_no_cycle_between_modules():
    """No module imports itself back through other modules, deferred imports included."""
    imports = import_graph()
    node_of = {m: m for imp in imports for m in (imp.source, imp.target)}
    report = cycle_report(imports, node_of)
    assert not report, "\n".join(report)
