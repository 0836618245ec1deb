"""planner/memory has no import loop (issue 28 item 4): every import between its modules,
function-local ones included, runs one way."""
from __future__ import annotations

import ast
from pathlib import Path

MEM = Path(__file__).parent.parent / "moeplan" / "planner" / "memory"
PKG = "moeplan.planner.memory"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in MEM.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PKG):
                if node.module == PKG:
                    deps |= {a.name for a in node.names}
                else:
                    deps.add(node.module[len(PKG) + 1:].split(".")[0])
            elif isinstance(node, ast.Import):
                deps |= {a.name[len(PKG) + 1:].split(".")[0] for a in node.names if a.name.startswith(PKG + ".")}
        graph[path.stem] = deps - {path.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> list[str] | None:
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack + [n, m]
            if m not in state and (c := visit(m, stack + [n])):
                return c
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n, [])):
            return c
    return None


def test_cycle_finder_finds_a_loop():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_memory_modules_import_one_way():
    graph = _graph()
    assert {"accounting", "compute_buffer", "devices", "kv", "split"} <= set(graph)
    assert _cycle(graph) is None, "import loop: " + " -> ".join(_cycle(graph) or [])
