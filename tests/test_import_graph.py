"""Imports go one way (DESIGN.md): cli -> api -> (shapes, graft, migrate) -> (validation, targets,
adapters) -> passes -> runtimes -> opsets -> rewriting -> leaves. This walks every import statement of ``bridge``,
``adapters`` and ``opsets`` (module level and inside functions: a lazy import is still a dependency)
and fails on any cycle between modules and on any import against that order, naming the edge.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bridge", "adapters", "opsets")

# Highest first. A module may import modules of its own layer entry or of any layer below it; within
# one entry, only modules of the same top-level sub-package may import each other (siblings listed in
# one entry stay independent). "bridge" alone is the package __init__ (lazy API re-exports).
LAYERS: list[tuple[str, ...]] = [
    ("bridge.__main__",),
    ("bridge.cli",),
    ("bridge",),
    ("bridge.api",),
    ("bridge.shapes", "bridge.graft", "bridge.migrate", "bridge.debug", "bridge.bench"),
    ("bridge.conversion",),
    ("bridge.precision",),
    ("bridge.validation", "bridge.targets", "bridge.inspection", "adapters"),
    ("bridge.passes",),
    ("bridge.runtimes",),
    ("opsets",),
    ("bridge.rewriting",),
    # leaves, lowest last
    ("bridge.report", "bridge.chatter", "bridge.progress", "bridge.model", "bridge.frameworks"),
    ("bridge.config",),
    ("bridge.io",),
    ("bridge.limits", "bridge.registry"),
    ("bridge.errors", "bridge.version", "bridge.provenance"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def resolve(importer: str, is_package: bool, node: ast.ImportFrom | ast.Import, modules: dict[str, Path]) -> list[str]:
    """The project modules an import statement loads (``from pkg import sub`` counts ``pkg.sub``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = importer.split(".") if is_package else importer.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base]) if base else ".".join(anchor)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    return project_modules(names, modules)


def project_modules(names: list[str] | set[str], modules: dict[str, Path]) -> list[str]:
    """The project module each dotted name lies in (``pkg.mod.attr`` -> ``pkg.mod``); others dropped."""
    targets = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name.split(".")[0] in PACKAGES:
            targets.append(name)
    return targets


_REFERENCE = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)*):[A-Za-z_][\w.]*$")  # "module:attribute" (registries, workers)


def string_imports(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """Modules a file imports by string: ``"module:attribute"`` references (registries, migrate workers),
    ``{"module": "x", ...}`` callable references, and code strings run in a child (``"from x import y"``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (isinstance(key, ast.Constant) and key.value == "module" and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)):
                    names.add(value.value)
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        match = _REFERENCE.match(node.value)
        if match:
            names.add(match.group(1))
        elif "import " in node.value:
            try:
                code = ast.parse(node.value)
            except SyntaxError:
                continue
            names.update(a.name if isinstance(n, ast.Import) else n.module or "" for n in ast.walk(code)
                         if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names)
    return set(project_modules(names, modules))


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in resolve(name, path.name == "__init__.py", node, modules):
                    if target != name:
                        graph[name].add(target)
        graph[name].update(t for t in string_imports(tree, modules) if t != name)
        graph.setdefault(name, set())
    return graph


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, the entry prefix that matched): the longest matching prefix wins."""
    best: tuple[int, str] | None = None
    for index, entry in enumerate(LAYERS):
        for prefix in entry:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    if best is None:
        raise AssertionError(f"module {module} is in no layer of tests/test_import_graph.py LAYERS; place it")
    return best


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components with more than one module are import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def backward_edges(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for importer, targets in sorted(graph.items()):
        li, pi = layer_of(importer)
        for target in sorted(targets):
            lt, pt = layer_of(target)
            if lt < li or (lt == li and pi != pt):
                bad.append(f"{importer} -> {target}  ({pi} may not import {pt})")
    return bad


def test_every_module_has_a_layer() -> None:
    for module in all_modules():
        layer_of(module)


def test_no_import_cycles() -> None:
    cycles = strongly_connected(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_follow_the_layer_order() -> None:
    bad = backward_edges(import_graph())
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_the_checker_sees_a_violation() -> None:
    """The walk itself works: a made-up backward edge and a made-up cycle are caught."""
    graph = {"opsets.registry": {"bridge.api"}, "bridge.api": {"opsets.registry"}}
    assert backward_edges(graph) == ["opsets.registry -> bridge.api  (opsets may not import bridge.api)"]
    assert strongly_connected(graph) == [["bridge.api", "opsets.registry"]]


def test_string_imports_are_edges() -> None:
    """``"module:function"`` references and child-process code strings count as imports."""
    modules = all_modules()
    tree = ast.parse('R = {"x": "bridge.api:convert"}\nC = {"module": "bridge.cli.main", "qualname": "main"}\n'
                     'CODE = "import sys; from bridge.migrate.worker import main"\n')
    assert string_imports(tree, modules) == {"bridge.api", "bridge.cli.main", "bridge.migrate.worker"}


if __name__ == "__main__":  # a quick listing while restructuring: python tests/test_import_graph.py
    g = import_graph()
    for c in strongly_connected(g):
        print("CYCLE", " <-> ".join(c))
    for e in backward_edges(g):
        print("BACK ", e)
