"""The packages' layers (docs/architecture.md): each imports only the layers below it, and no
two packages import each other, directly or around a cycle. The SDK is the bottom layer:
it installs on its own (client/pyproject.toml) and `core` re-exports its wire contract."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from core.paths import PROJECT_ROOT

# Each package (by import name) and the project packages it may import. tests may import
# everything.
LAYERS: dict[str, set[str]] = {
    "tmr_client": set(),
    "core": {"tmr_client"},
    "runtime": {"core"},  # the library the stubs, export, server and perf run in-process
    "python_backends": {"core", "runtime"},
    "export": {"core", "runtime"},
    "server": {"tmr_client", "core", "runtime"},
    "perf": {"tmr_client", "core", "runtime", "python_backends", "export", "server"},
    "cli": {"tmr_client", "core", "export", "server"},
}
PACKAGES = set(LAYERS) | {"tests"}
FOLDERS = {"tmr_client": "client"}  # the SDK's folder is not its import name
# What the SDK may import besides the standard library and itself: its two requirements
# (client/pyproject.toml) with what tritonclient brings, and OpenTelemetry when present.
SDK_THIRD_PARTY = {"numpy", "tritonclient", "google", "opentelemetry"}


def folder(package: str) -> Path:
    return PROJECT_ROOT / FOLDERS.get(package, package)


def sources(package: str) -> list[Path]:
    """The package's modules (not a build folder that `pip install ./client` leaves)."""
    root = folder(package)
    return sorted(p for p in root.rglob("*.py") if "build" not in p.relative_to(root).parts)


def module_exists(dotted: str) -> bool:
    """`dotted` names a module of a project package (a string importlib would load)."""
    head, *rest = dotted.split(".")
    if head not in PACKAGES or not rest:
        return False
    base = folder(head).joinpath(*rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(project package, line) of every absolute import in `path`, lazy ones included, and
    of every string that names a project module (what importlib.import_module loads)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and module_exists(node.value):
            names = [node.value]
        else:
            continue
        found |= {(n.split(".")[0], node.lineno) for n in names if n.split(".")[0] in PACKAGES}
    return found


def package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["file:line", ...] (other packages only)."""
    edges: dict[str, dict[str, list[str]]] = {name: {} for name in LAYERS}
    for package in LAYERS:
        for path in sources(package):
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


def test_every_declared_edge_is_used():
    """A layer allows only what its package imports today: a new edge is a decision."""
    used = {package: set(targets) for package, targets in package_imports().items()}
    unused = {package: sorted(allowed - used[package]) for package, allowed in LAYERS.items()
              if allowed - used[package]}
    assert unused == {}


def test_a_models_source_plugin_imports_only_the_export_layer_and_below():
    """model_repository/*/source/source.py: loaded by path by `tmr export` and `tmr add`."""
    allowed = {"tmr_client", "core", "runtime", "export"}
    plugins = sorted((PROJECT_ROOT / "model_repository").glob("*/source/source.py"))
    assert plugins
    wrong = [f"{path.relative_to(PROJECT_ROOT)}:{line} -> {target}"
             for path in plugins for target, line in imported_packages(path)
             if target not in allowed]
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
    assert on_disk == {FOLDERS.get(p, p) for p in PACKAGES}
    order = ["tmr_client", "core", "runtime", "python_backends", "export", "server", "perf",
             "cli"]
    for i, package in enumerate(order):
        assert LAYERS[package] <= set(order[:i]), package


def test_the_sdk_imports_only_its_requirements_and_the_standard_library():
    found: set[str] = set()
    for path in sources("tmr_client"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    assert found - sys.stdlib_module_names - {"tmr_client", "__future__"} <= SDK_THIRD_PARTY


MAX_MODULE_LINES = 450  # a module past this is split by concern (issue 47)
# perf/ keeps subjects, sampling and verdicts; Locust runs every load (#37).
PERF_LINES = 3300


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_450_lines_and_perf_keeps_within_its_lines():
    long = {str(p.relative_to(PROJECT_ROOT)): lines(p) for package in LAYERS
            for p in sources(package) if lines(p) > MAX_MODULE_LINES}
    assert long == {}
    assert sum(lines(p) for p in sources("perf")) <= PERF_LINES
