"""Module-level import graph of the package (every import, lazy ones included), for the
import-loop checks: `from moeplan.planner.model import registry` is an edge to the module
moeplan.planner.model.registry, not to the package."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "moeplan"


def module_name(path: Path, root: Path = PKG) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_graph(root: Path = PKG) -> dict[str, set[str]]:
    """module -> the package modules it imports."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    if sub in paths:
                        found.add(sub)
                    elif base in paths:
                        found.add(base)
        graph[mod] = found - {mod}
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each an import loop): the
    same Tarjan pass benchmarks/code_shape.py prints its figure with."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("moeplan_bench_code_shape",
                                                  PKG.parent / "benchmarks" / "code_shape.py")
    assert spec is not None and spec.loader is not None
    shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shape)
    return sorted(shape.import_loops(graph))
