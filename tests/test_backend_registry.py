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

    p = Placement(extra=(("kt_gpu_prefill_token_threshold", "500"), ("rtr", "1"), ("llama_build", "6263"),
                         ("tensor_split", "3,1")))
    assert p.options == PlanOptions(kt_gpu_prefill_token_threshold=500, rtr=True, llama_build=6263,
                                    tensor_split="3,1")
    assert Placement().options == PlanOptions()
    with pytest.raises(InputError, match="unknown plan option 'kt_gpu_prefil_token_threshold'"):
        _ = Placement(extra=(("kt_gpu_prefil_token_threshold", "500"),)).options
    with pytest.raises(InputError, match="is not a build number"):
        _ = Placement(extra=(("llama_build", "0"),)).options
    # a backend's own settings are its record's options
    assert backends.get("ktransformers").takes("kt_num_gpu_experts")
    assert not backends.get("llama.cpp").takes("rtr") and backends.get("ik_llama.cpp").takes("rtr")
