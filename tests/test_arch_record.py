"""An architecture is one record (planner/model/registry.py): its config names, its files,
its place in the import graph.

- README "Adding an architecture" names exactly the files adding one touches, and they exist;
- each MoE fact's config.json names (HfKeys) appear in no module but the record (and the
  converter's defaults in hf_config.py), and an architecture's name in no module but the
  record, save the listed rules that predate it;
- every reader of a config (HF folder, bundled profile, synthesis, limits) asks the record;
- planner/model has no import loop (issue 28 item 4).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from import_graph import import_loops, module_graph

from moeplan.planner.model import registry
from moeplan.planner.model.hf_config import FACT_GGUF_KEYS, HfKeys

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "moeplan"

# what adding an architecture touches (README "Adding an architecture")
ADDING_AN_ARCHITECTURE = {
    "moeplan/planner/model/registry.py", "moeplan/planner/model/hf_config.py",
    "moeplan/planner/model/synth_tensors.py", "moeplan/profiles/models/<model>.toml",
    "tests/test_arch_conformance.py", "tests/llama_fixtures.py", "tests/data/graph_barriers.json",
}


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^#|^\*\*)", text, re.S | re.M)  # to the next heading or bold lead
    assert m, f"README has no '### {title}' section"
    return m.group(1)


def test_readme_names_the_files_adding_an_architecture_touches():
    named = set(re.findall(r"`((?:moeplan|tests)/[^`\s]+)`", _readme_section("Adding an architecture")))
    named.discard("tests/test_arch_record.py")  # this check, named where the section says what checks it
    assert named == ADDING_AN_ARCHITECTURE
    for path in named:
        assert (ROOT / path.replace("<model>.toml", "")).exists(), path
    package = {p for p in named if p.startswith("moeplan/")}
    assert len(package) == 4  # three modules and the profile


def _code_strings(path: Path) -> set[str]:
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}


@pytest.fixture(scope="module")
def strings() -> dict[str, set[str]]:
    return {str(p.relative_to(ROOT)): _code_strings(p) for p in PKG.rglob("*.py")}


# intermediate_size is also the converter's generic dense FFN width (TextModel's
# feed_forward_length, synth._common) and an input limit of its own
GENERIC_KEYS = {"intermediate_size"}


def test_config_names_of_the_moe_facts_live_in_the_record(strings):
    defaults = set(HfKeys().all_names())
    for arch in registry.ARCHS.values():
        for key in set(arch.hf.all_names()) - GENERIC_KEYS:
            where = {f for f, s in strings.items() if key in s}
            allowed = {"moeplan/planner/model/registry.py"}
            if key in defaults:
                allowed.add("moeplan/planner/model/hf_config.py")
            assert where <= allowed, f"{arch.name}'s {key!r} is read outside its record: {sorted(where - allowed)}"


# rules that name an architecture outside its record, from before the record held them
NAMED_ELSEWHERE = {
    "qwen3moe": {"moeplan/planner/cost/graph.py"},  # the default block of an unlisted architecture
    "deepseek2": {"moeplan/executor/layout.py"},
    "glm-dsa": {"moeplan/planner/memory/graph_buffers.py"},
}
# a backend's own list of what it cannot run: its runtime record (planner/runtimes/)
BACKENDS = {"moeplan/planner/backends.py"} | {str(p.relative_to(ROOT)) for p in (PKG / "planner" / "runtimes").glob("*.py")}


def test_an_architecture_is_named_by_its_record_alone(strings):
    for name in registry.ARCHS:
        where = {f for f, s in strings.items() if name in s} - BACKENDS
        allowed = {"moeplan/planner/model/registry.py"} | NAMED_ELSEWHERE.get(name, set())
        assert where <= allowed, f"{name} is named outside its record: {sorted(where - allowed)}"


def test_every_reader_of_a_config_asks_the_record():
    graph = module_graph()
    for reader in ("moeplan.probes.hf", "moeplan.profiles.model_profiles", "moeplan.planner.model.synth",
                   "moeplan.planner.limits"):
        assert "moeplan.planner.model.registry" in graph[reader], reader


def test_hf_keys_read_a_fact_under_the_first_name_present():
    keys = HfKeys(expert_count=("moe_num_experts",), expert_used_count=("moe_topk",), per_layer=("moe_topk",))
    cfg = {"moe_num_experts": 64, "num_experts": 8, "moe_topk": [8, 8, 8]}
    assert keys.value(cfg, "expert_count") == 64 and keys.value(cfg, "expert_used_count") == 8
    hp: dict = {}
    keys.write(cfg, hp)
    assert hp == {"expert_count": 64, "expert_used_count": 8}
    with pytest.raises(ValueError, match="moe_topk"):
        keys.value({"moe_topk": [8, 4]}, "expert_used_count")
    assert set(FACT_GGUF_KEYS.values()) <= {"expert_count", "expert_used_count", "expert_feed_forward_length",
                                            "expert_shared_feed_forward_length", "expert_shared_count",
                                            "leading_dense_block_count"}


def test_the_model_package_has_no_import_loop():
    loops = [loop for loop in import_loops(module_graph()) if any(m.startswith("moeplan.planner.model") for m in loop)]
    assert loops == []


def test_the_loop_finder_sees_a_loop(tmp_path):
    pkg = tmp_path / "moeplan" / "planner"
    pkg.mkdir(parents=True)
    (tmp_path / "moeplan" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from moeplan.planner import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("from moeplan.planner.a import x\n")
    assert import_loops(module_graph(tmp_path / "moeplan")) == [["moeplan.planner.a", "moeplan.planner.b"]]
