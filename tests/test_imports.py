"""Imports run one way (issue 21): no import cycle among the package's modules, and the
characterization package shares its data model through public names only.

Edges are read from the source with `ast`, at module level and inside functions alike (a deferred
import still ties two modules together): `from .x import y`, `from . import x` (module x),
`import storagebrief.x`, `from storagebrief.x import y`. A module that imports a package imports
its __init__, so a submodule importing its own package counts as an edge to __init__.
"""
from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"
PACKAGE = "storagebrief"


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its __init__)."""
    out = {}
    for f in sorted((LIB / PACKAGE).rglob("*.py")):
        parts = list(f.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module a dotted name means: itself, or the nearest enclosing module (an attribute)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, mods: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports anywhere in its source."""
    tree = ast.parse(mods[name].read_text(), filename=str(mods[name]))
    here = name if _is_package(name, mods) else name.rpartition(".")[0]     # what `.` means
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(_resolve(a.name, mods) for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                target = f"{base}.{node.module}" if node.module else base
            elif node.module and node.module.split(".")[0] == PACKAGE:
                target = node.module
            else:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                # `from . import x`: module x when there is one, else a name of the package itself
                out.add(sub if sub in mods else _resolve(target, mods))
    out.discard(None)
    out.discard(name)
    return out


def graph(mods: dict[str, Path] | None = None) -> dict[str, set[str]]:
    mods = mods or _modules()
    return {m: imports_of(m, mods) for m in mods}


def cycles(package_prefix: str) -> list[list[str]]:
    """Every import cycle (a strongly connected component of more than one module) among the modules
    whose name starts with package_prefix, each as a sorted list of module names."""
    g = graph()
    nodes = [m for m in g if m == package_prefix or m.startswith(package_prefix + ".")]
    inside = set(nodes)
    edges = {m: sorted(g[m] & inside) for m in nodes}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:           # Tarjan's algorithm (the package is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_edges_are_read_as_said():
    g = graph()
    c = "storagebrief.core.characterize"
    assert f"{c}.model" in g[f"{c}.parse"]                    # from .model import ...
    assert f"{c}.outputs" in g[c]                             # the package's __init__ imports its modules
    assert "storagebrief.core.characterize" in g["storagebrief.core.sweep"]   # from . import characterize


def test_no_import_cycle_anywhere_in_the_package():
    assert cycles(PACKAGE) == []


def test_characterize_and_the_trace_format_run_one_way():
    assert cycles(f"{PACKAGE}.core.characterize") == []
    g = graph()
    assert g[f"{PACKAGE}.core.traceformat"] == set() and g[f"{PACKAGE}.core.machine"] == set()
    assert g[f"{PACKAGE}.core.characterize.model"] == set()
    assert not any(m.startswith(f"{PACKAGE}.core.characterize") for m in g[f"{PACKAGE}.core.blocktrace"])
    assert f"{PACKAGE}.core.blocktrace" not in set().union(
        *(g[m] for m in g if m.startswith(f"{PACKAGE}.core.characterize")))


def test_characterize_modules_share_public_names_only():
    mods = _modules()
    pkg = f"{PACKAGE}.core.characterize"
    private = []
    for name, path in mods.items():
        if not name.startswith(pkg + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                private += [f"{name}: {a.name} from .{node.module}" for a in node.names if a.name.startswith("_")]
    assert private == []
