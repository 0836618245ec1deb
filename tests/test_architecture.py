"""The package's layers, read from the imports: each layer imports only the layers below it.

    commands -> ui -> tuner -> executor, launch -> probes -> profiles -> planner -> errors, units
                                                         io (the atomic writer) is usable from any layer but planner
                                                         planfile (reading plan files) sits on planner, for tuner and up
    check (pure parsing of run logs and their comparison with the planner) -> planner; used by
    tuner, ui and commands

Every `import` and `from ... import` in every module counts, including those inside
functions (the lazy ones that keep start-up fast are still dependencies).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "moeplan"

# layer -> the moeplan layers it may import (itself always allowed)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "planner": {"errors", "units"},
    "io": {"errors"},
    "planfile": {"planner", "errors", "units"},
    "check": {"planner", "errors", "units"},
    "profiles": {"planner", "errors", "units"},
    "probes": {"planner", "profiles", "io", "errors", "units"},
    "launch": {"planner", "profiles", "probes", "io", "errors", "units"},
    "executor": {"planner", "profiles", "probes", "io", "errors", "units"},
    "tuner": {"planner", "planfile", "profiles", "probes", "launch", "executor", "check", "io", "errors", "units"},
    "ui": {"planner", "planfile", "profiles", "probes", "launch", "tuner", "executor", "check", "io", "errors", "units"},
    "commands": {"planner", "planfile", "profiles", "probes", "launch", "tuner", "executor", "check", "ui", "io",
                 "errors", "units"},
    "cli": {"commands", "errors"},
    "__main__": {"cli"},
    "__init__": set(),
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else parts
    return ".".join(parts)


def imports_of(path: Path, module: str | None = None) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = module or module_name(path)
    pkg = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("moeplan")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "moeplan":  # from moeplan import X: X is a layer, or a name of the package itself
                found |= {f"moeplan.{a.name}" if a.name in ALLOWED else "moeplan" for a in node.names}
            elif mod.startswith("moeplan"):
                found.add(mod)
    return found


MODULES = sorted(p for p in PKG.rglob("*.py"))


def edges() -> list[tuple[str, str, str]]:
    out = []
    for path in MODULES:
        src = module_name(path)
        for dst in imports_of(path):
            if dst == "moeplan":
                dst = "moeplan.__init__"
            out.append((src, dst, str(path.relative_to(PKG.parent))))
    return out


def test_every_layer_is_known():
    layers = {layer_of(module_name(p)) for p in MODULES}
    assert layers <= set(ALLOWED), layers - set(ALLOWED)


def test_imports_go_one_way():
    bad = []
    for src, dst, where in edges():
        a, b = layer_of(src), layer_of(dst)
        if a != b and b not in ALLOWED[a] and not (b == "__init__" and dst == "moeplan.__init__"):
            bad.append(f"{where}: {a} imports {dst}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_layer_graph_has_no_cycles():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in edges():
        a, b = layer_of(src), layer_of(dst)
        if a != b and b != "__init__":
            graph.setdefault(a, set()).add(b)
    seen: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        seen[n] = 1
        for m in graph.get(n, ()):
            if seen.get(m) == 1:
                pytest.fail("cycle: " + " -> ".join(stack + [n, m]))
            if m not in seen:
                visit(m, stack + [n])
        seen[n] = 2

    for n in list(graph):
        if n not in seen:
            visit(n, [])


def test_the_checker_sees_a_bad_edge(tmp_path):
    # the rule itself can fail: a planner module importing probes is reported
    bad = tmp_path / "moeplan" / "planner" / "x.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from moeplan.probes import gpu\n    from ..ui import console\n")
    found = imports_of(bad, "moeplan.planner.x")
    assert {"moeplan.probes", "moeplan.ui"} <= found
    assert "probes" not in ALLOWED["planner"]
