"""The backend registry: one record per runtime module, no backend named elsewhere in the
package, the README's recipe naming the files it takes, and a priors file that refuses keys
it does not know."""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from moeplan.planner import backends
from moeplan.profiles import backends as toml_priors

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import code_shape  # noqa: E402


def _toml() -> dict:
    return tomllib.loads(resources.files("moeplan.profiles").joinpath("backends.toml").read_text())


def test_every_runtime_module_is_one_registered_backend():
    mods = sorted(p.stem for p in (ROOT / "moeplan/planner/runtimes").glob("*.py") if p.stem != "__init__")
    assert sorted(b.module.rsplit(".", 1)[1] for b in backends.BACKENDS.values()) == mods
    assert backends.NAMES[0] == backends.DEFAULT == "llama.cpp"
    assert backends.NAMES == ("llama.cpp", "ik_llama.cpp", "ktransformers", "vllm", "sglang")
    for b in backends.BACKENDS.values():
        assert (ROOT / "moeplan/launch" / f"{b.emitter}.py").is_file(), b.name
        assert b.priors_key in _toml(), b.name


def test_no_backend_name_is_compared_outside_its_own_modules():
    assert [f"{f}:{line}: {src}" for f, line, src in code_shape.outside_compares()] == []


def test_code_shape_sees_a_backend_compare(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('if b == "ktransformers" or b in ("vllm", "other"):\n    pass\nt = {"sglang": 1}.get(b)\n')
    hits = code_shape.compares(f, set(backends.NAMES))
    assert [(line, sorted(names)) for line, names, _ in hits] == [(1, ["ktransformers"]), (1, ["vllm"]),
                                                                   (3, ["sglang"])]


def test_the_readme_recipe_names_the_files_a_backend_takes():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"### Adding a backend\n(.*?)(?=\n### |\n## )", readme, re.S)
    assert m, "README.md has no '### Adding a backend' subsection"
    text = m.group(1)
    ik = backends.get("ik_llama.cpp")
    for path in ("moeplan/planner/runtimes/", "moeplan/profiles/backends.toml", "moeplan/launch/",
                 "tests/golden/launch/", ik.module.replace(".", "/") + ".py"):
        assert path in text, path
    # the files it names exist
    for path in re.findall(r"`((?:moeplan|tests)/[\w/.]+)`", text):
        assert (ROOT / path.rstrip("/")).exists(), path


def test_the_priors_file_refuses_a_misspelt_prior():
    data = _toml()
    assert toml_priors.unknown_keys(data) == []
    bad = {**data, "llama_cpp": {**data["llama_cpp"], "eta_gpuu": 0.7}}
    with pytest.raises(ValueError, match=r"\[llama_cpp\] eta_gpuu is no prior"):
        toml_priors.priors_from(bad, "llama.cpp")
    stray = {**data, "llamacpp": {"eta_gpu": 0.7}}
    with pytest.raises(ValueError, match=r"\[llamacpp\] is no backend's section"):
        toml_priors.priors_from(stray, "ik_llama.cpp")
    # fitted figures come from fit.json, never from the TOML
    fitted = {**data, "vllm": {**data["vllm"], "term_scale": {"decode": {"cpu": 2.0}}}}
    with pytest.raises(ValueError, match="term_scale is no prior"):
        toml_priors.priors_from(fitted, "vllm")
    assert toml_priors.priors_from(data, "ktransformers") == toml_priors.read_priors("ktransformers")


def test_a_stand_in_runner_is_costed_with_mainline_kernels():
    s = backends.behaviour("executor")
    assert s is backends.STAND_IN and not s.gguf_runner and not s.layerwise_gpu_prefill
    assert s.isa_dot_scale == backends.get("llama.cpp").isa_dot_scale
    with pytest.raises(KeyError):
        backends.get("executor")


def test_plan_options_are_a_typed_record_that_refuses_unknown_keys():
    from moeplan.errors import InputError
    from moeplan.planner.options import PlanOptions
    from moeplan.planner.placement import Placement

    typed = PlanOptions(kt_gpu_prefill_token_threshold=500, rtr=True, llama_build=6263, tensor_split="3,1")
    p = Placement(options=typed)
    # written as an object of the set fields, with their JSON types
    assert p.to_dict()["options"] == {"kt_gpu_prefill_token_threshold": 500, "rtr": True, "llama_build": 6263,
                                      "tensor_split": "3,1"}
    assert Placement.from_dict(p.to_dict()) == p and Placement().to_dict()["options"] == {}
    # a placement written before the typed record: (key, text) pairs under `extra`
    old = {"extra": [["kt_gpu_prefill_token_threshold", "500"], ["rtr", "1"], ["llama_build", "6263"],
                     ["tensor_split", "3,1"]]}
    assert Placement.from_dict(old).options == typed
    with pytest.raises(InputError, match="unknown plan option 'kt_gpu_prefil_token_threshold'"):
        Placement.from_dict({"extra": [["kt_gpu_prefil_token_threshold", "500"]]})
    with pytest.raises(InputError, match="unknown plan option 'tensor_splits'"):
        Placement.from_dict({"options": {"tensor_splits": "3,1"}})
    with pytest.raises(InputError, match="is not a build number"):
        Placement.from_dict({"extra": [["llama_build", "0"]]})
    with pytest.raises(InputError, match="both `options` and the older `extra`"):
        Placement.from_dict({"extra": [], "options": {}})
    # a backend's own settings are its record's options
    assert backends.get("ktransformers").takes("kt_num_gpu_experts")
    assert not backends.get("llama.cpp").takes("rtr") and backends.get("ik_llama.cpp").takes("rtr")


# a plan `moeplan tune qwen3-235b-a22b --hw HW --gpus 1,3 --backend ktransformers --out FILE`
# wrote at commit 47a6b1b, before the typed record (HW: `moeplan hardware --gpu "RTX 3090"
# --gpu-count 4 --cpu "Ryzen 9 9900X" --ram 192G`): its options are `extra` pairs
OLD_PLAN = ROOT / "tests" / "data" / "plan_extra_format_47a6b1b.json"


def test_a_plan_file_of_the_pairs_format_still_loads(tmp_path):
    import json

    from typer.testing import CliRunner

    from moeplan.cli import app
    from moeplan.planner.options import PlanOptions
    from moeplan.planner.plan import plan_from_doc

    doc = json.loads(OLD_PLAN.read_text())
    assert doc["placement"]["extra"] == [["tensor_split", "79,16"], ["kt_gpu_prefill_token_threshold", "503"],
                                         ["devices", "CUDA1,CUDA3"]]
    plan = plan_from_doc(doc, "plan.json")
    assert plan.placement.options == PlanOptions(tensor_split="79,16", kt_gpu_prefill_token_threshold=503,
                                                 devices="CUDA1,CUDA3")
    assert all(a.placement.options == PlanOptions(tensor_split="79,16") for a in plan.alternatives)
    # the digest (launch files' headers, tuner stamps) is the one the old moeplan wrote
    assert plan.inputs_digest() == doc["inputs_digest"]
    # written back in the typed form, it reads the same
    new = plan.to_dict()
    assert "extra" not in new["placement"] and new["placement"]["options"] == {
        "tensor_split": "79,16", "kt_gpu_prefill_token_threshold": 503, "devices": "CUDA1,CUDA3"}
    assert plan_from_doc(json.loads(json.dumps(new)), "plan.json") == plan
    # emit reads it, and an unknown option in a plan file is a one-line error with a hint
    out = CliRunner().invoke(app, ["emit", str(OLD_PLAN), "--out", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    launch = (tmp_path / "run" / "launch.sh").read_text()
    assert "--kt-gpu-prefill-token-threshold 503" in launch and f"from plan {doc['inputs_digest']}" in launch
    doc["placement"]["extra"].append(["kt_threshold", "9"])
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    bad = CliRunner().invoke(app, ["emit", str(tmp_path / "bad.json"), "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "unknown plan option 'kt_threshold'" in bad.output and "known:" in bad.output
    new["placement"]["options"]["rtr"] = "yes"
    (tmp_path / "bad2.json").write_text(json.dumps(new))
    bad = CliRunner().invoke(app, ["emit", str(tmp_path / "bad2.json"), "--out", str(tmp_path / "bad2")])
    assert bad.exit_code == 2 and "placement.options.rtr" in bad.output


# a string equal to a plan option's name outside planner/options.py, and why it is not one
NOT_OPTIONS = {("moeplan/commands/plan.py", "devices"): "a hardware profile's spec_inputs key"}


def test_no_option_name_is_spelt_outside_the_record():
    """Readers and writers use PlanOptions' fields (and the *_KEY names a backend's record
    lists): no string key of a plan option outside planner/options.py."""
    import ast

    from moeplan.planner.options import OPTION_KEYS

    found = []
    for path in sorted((ROOT / "moeplan").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "moeplan/planner/options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in OPTION_KEYS and (rel, node.value) not in NOT_OPTIONS:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, found
    assert all(k in OPTION_KEYS for b in backends.NAMES for k in backends.get(b).options)
