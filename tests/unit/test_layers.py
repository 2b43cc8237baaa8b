"""The packages' layers (README "Layout"): each imports only the layers below it, and no
two packages import each other, directly or around a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from core.paths import PROJECT_ROOT

# Each package and the project packages it may import. tests may import everything.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "python_backends": {"core"},
    "client": {"core"},
    "export": {"core", "python_backends"},
    "server": {"core", "client", "python_backends", "export"},
    "perf": {"core", "client", "python_backends", "export", "server"},
    "cli": {"core", "client", "python_backends", "export", "server", "perf"},
}
PACKAGES = set(LAYERS) | {"tests"}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(project package, line) of every absolute import in `path`, lazy ones included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {(n.split(".")[0], node.lineno) for n in names if n.split(".")[0] in PACKAGES}
    return found


def package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["file:line", ...] (other packages only)."""
    edges: dict[str, dict[str, list[str]]] = {name: {} for name in LAYERS}
    for package in LAYERS:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            for target, line in imported_packages(path):
                if target != package:
                    where = f"{path.relative_to(PROJECT_ROOT)}:{line}"
                    edges[package].setdefault(target, []).append(where)
    return edges


def test_every_import_follows_the_declared_layers():
    wrong = [f"{package} -> {target}: {', '.join(sorted(places))}"
             for package, targets in package_imports().items()
             for target, places in targets.items() if target not in LAYERS[package]]
    assert wrong == []


def test_the_packages_import_each_other_in_no_cycle():
    edges = {p: set(t) for p, t in package_imports().items()}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for target in sorted(edges.get(node, ())):
            cycle = visit(target, [*path, node])
            if cycle:
                return cycle
        done.add(node)
        return None

    cycles = [c for c in (visit(p, []) for p in sorted(edges)) if c]
    assert cycles == []


def test_the_declared_layers_are_acyclic_and_cover_every_package():
    on_disk = {p.parent.name for p in PROJECT_ROOT.glob("*/__init__.py")}
    assert on_disk == PACKAGES
    order = ["core", "python_backends", "client", "export", "server", "perf", "cli"]
    for i, package in enumerate(order):
        assert LAYERS[package] <= set(order[:i]), package
