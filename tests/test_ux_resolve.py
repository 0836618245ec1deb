"""Issue 28 item 4: placement resolution is the planner's, taking one parameter record; the
command's wrapper gives the same placement; _choose_plan is flat."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

from moeplan.commands import placement_opts
from moeplan.planner import resolve, search
from moeplan.planner.resolve import PlacementRequest, resolve_placement
from moeplan.probes.models import resolve_model

ROOT = Path(__file__).resolve().parents[1] / "moeplan"


def test_planner_resolves_a_record():
    assert list(inspect.signature(resolve_placement).parameters) == ["model", "req"]
    m = resolve_model("qwen3-30b-a3b")
    req = PlacementRequest(cpu_moe_layers=10, ctx="32k", kv_type="q8_0", threads=8, logical_cpus=16,
                           numa="none", ubatch=1024)
    p = resolve_placement(m, req)
    assert p.cpu_moe_layers == m.moe_layer_indices[:10] and p.n_ctx == 32768 and p.cache_type_k == "q8_0"
    assert placement_opts.resolve_placement(m, cpu_moe_layers=10, ctx="32k", kv_type="q8_0", threads=8,
                                            logical_cpus=16, numa="none", ubatch=1024) == p


def _depth(node: ast.AST, d: int = 0) -> int:
    kids = [c for c in ast.iter_child_nodes(node)]
    blocks = (ast.For, ast.While, ast.If, ast.With, ast.Try)
    return max([d] + [_depth(c, d + isinstance(c, blocks)) for c in kids])


def test_no_domain_logic_in_commands_and_choose_plan_flat():
    tree = ast.parse((ROOT / "commands" / "placement_opts.py").read_text())
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert all(n.end_lineno - n.lineno < 10 for n in fns), [n.name for n in fns]
    src = inspect.getsource(search._choose_plan)
    fn = ast.parse(src.lstrip()).body[0]
    assert _depth(fn) <= 2, _depth(fn)
    for f in (resolve.resolve_placement, resolve._cpu_expert_layers):
        assert len(inspect.getsource(f).splitlines()) <= 80
