"""The package's shape, as issue 28 measures it: string comparisons of backend names outside
their own modules, the largest module and the longest function (lines), and import loops
between moeplan's modules.

    python benchmarks/code_shape.py [--list]

A backend-name comparison is an `==` / `!=` / `in` / `not in` whose other side is a string
literal naming a backend (or a tuple/list/set of them), or a dict literal keyed by backend
names that is indexed or `.get()`-ed (a per-backend table). A backend's own modules are those
its record names (moeplan.planner.backends: the module defining it and its emitter under
launch/); the registry itself is exempt. Import loops: strongly connected components of the
graph of `import` / `from ... import` between moeplan modules, function-level imports
included (tests/test_architecture.py reads imports the same way).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "moeplan"
sys.path.insert(0, str(ROOT))


def backend_names() -> dict[str, set[str]]:
    """{backend name: its own module paths relative to the repository}."""
    from moeplan.planner import backends
    own: dict[str, set[str]] = {}
    for b in backends.BACKENDS.values():
        mods = {f"moeplan/launch/{b.emitter}.py"}
        mod = getattr(b, "module", "")
        if mod:
            mods.add(mod.replace(".", "/") + ".py")
        own[b.name] = mods
    return own


REGISTRY = {"moeplan/planner/backends.py", "moeplan/planner/runtimes/__init__.py"}


def _names_in(node: ast.AST, names: set[str]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
    return set()


def compares(path: Path, names: set[str]) -> list[tuple[int, set[str], str]]:
    """(line, backend names, source) of every backend-name comparison in a file."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        hit: set[str] = set()
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                hit |= _names_in(side, names)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            hit = {k.value for k in node.value.keys if isinstance(k, ast.Constant) and k.value in names}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Dict):
            hit = {k.value for k in node.func.value.keys if isinstance(k, ast.Constant) and k.value in names}
        if hit:
            out.append((node.lineno, hit, lines[node.lineno - 1].strip()))
    return sorted(out, key=lambda x: x[0])


def outside_compares() -> list[tuple[str, int, str]]:
    own = backend_names()
    names = set(own)
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in REGISTRY:
            continue
        for line, hit, src in compares(path, names):
            if all(rel in own[n] for n in hit):
                continue
            found.append((rel, line, src))
    return found


def functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.end_lineno - n.lineno + 1, n.name) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                # `from a.b import c`: c may be a module of a.b
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != m and t != "moeplan":
                    graph[m].add(t)
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="list every comparison, module and loop counted")
    a = ap.parse_args(argv)
    found = outside_compares()
    files = sorted({f for f, _, _ in found})
    sizes = sorted(((len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(ROOT).as_posix())
                    for p in PKG.rglob("*.py")), reverse=True)
    funcs = sorted(((n, f"{p.relative_to(ROOT).as_posix()}:{name}") for p in PKG.rglob("*.py")
                    for n, name in functions(p)), reverse=True)
    loops = import_loops(import_graph())
    print(f"backend-name comparisons outside their modules: {len(found)} in {len(files)} files")
    print(f"largest module: {sizes[0][1]} ({sizes[0][0]} lines)")
    print(f"longest function: {funcs[0][1]} ({funcs[0][0]} lines)")
    print(f"functions over 80 lines: {sum(1 for n, _ in funcs if n > 80)}; modules over 500 lines: "
          f"{sum(1 for n, _ in sizes if n > 500)}")
    print(f"import loops: {len(loops)}")
    if a.list:
        for f, line, src in found:
            print(f"  {f}:{line}: {src}")
        for n, name in sizes[:10]:
            print(f"  {n:5d} {name}")
        for n, name in funcs[:10]:
            print(f"  {n:5d} {name}")
        for loop in loops:
            print("  loop: " + " <-> ".join(loop))
    cost = [(n, name) for n, name in sizes if name.startswith("moeplan/planner/cost/")]
    cost_f = [(n, name) for n, name in funcs if name.startswith("moeplan/planner/cost/")]
    print(f"cost model: largest module {cost[0][1]} ({cost[0][0]} lines), longest function {cost_f[0][1]} "
          f"({cost_f[0][0]} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
