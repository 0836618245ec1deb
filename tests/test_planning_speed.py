"""What a plan loads and evaluates (issue 31): the speed itself is benchmarks/startup.py's and
benchmarks/planning_speed.py's to print; these tests keep the causes from coming back."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from moeplan.commands.coerce import fast_value

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# third-party packages `tune --json` may load: typer and what typer itself imports at start
ALLOWED_THIRD_PARTY = {"typer", "annotated_doc", "shellingham"}
# what must never load on the planning path, whatever the allowlist says (each costs 0.02-0.5 s)
HEAVY = {"numpy", "scipy", "gguf", "yaml", "pydantic", "pydantic_core", "rich", "torch", "matplotlib",
         "psutil", "cpuinfo", "pynvml", "platformdirs", "safetensors", "markdown_it", "pygments"}

_PROBE = r"""
import contextlib, io, json, runpy, sys
sys.argv = ["moeplan"] + json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_module("moeplan", run_name="__main__")
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _loaded(args: list[str]) -> tuple[int, set[str], set[str]]:
    """(exit code, top-level packages not in the standard library, every module) of a CLI run."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    mods = set(doc["modules"])
    tops = {m.split(".")[0] for m in mods}
    third = {t for t in tops - set(sys.stdlib_module_names) if not t.startswith("_") and t != "moeplan"}
    return doc["code"], third, mods


@pytest.mark.parametrize("args", [["tune", "glm-4.5", "--hw", "desktop-4090-ddr5", "--json"],
                                  ["tune", "kimi-k2", "--quant", "Q4_K_M", "--hw", "seed-rtxpro6000-2x6548y",
                                   "--json"]])
def test_tune_json_loads_no_heavy_module(args):
    code, third, mods = _loaded(args)
    assert code in (0, None)
    assert not third & HEAVY, f"heavy modules on the planning path: {sorted(third & HEAVY)}"
    assert third <= ALLOWED_THIRD_PARTY, \
        f"new third-party modules on the planning path: {sorted(third - ALLOWED_THIRD_PARTY)}"
    # the executor, the tuner and the probes that measure a machine stay out of a plan
    assert not {m for m in mods if m.startswith(("moeplan.executor", "moeplan.tuner", "moeplan.probes.dram"))}


def test_the_table_loads_rich_and_the_probe_sees_it():
    """The check above is not vacuous: printing a table does load rich."""
    _, third, _ = _loaded(["tune", "glm-4.5", "--hw", "desktop-4090-ddr5"])
    assert "rich" in third


def test_version_and_help_load_only_typer():
    for args in (["--version"], ["--help"], ["tune", "--help"]):
        _, third, mods = _loaded(args)
        assert third <= ALLOWED_THIRD_PARTY, (args, third)
        assert "moeplan.planner.search" not in mods, args


# ---- the search evaluates each placement once ------------------------------------------------

@pytest.mark.parametrize("model,hw", [("glm-4.5", "desktop-4090-ddr5"), ("kimi-k2", "seed-rtxpro6000-2x6548y"),
                                      ("qwen3-30b-a3b", "desktop-3060-ddr4")])
def test_no_placement_evaluated_twice(model, hw):
    from moeplan.planner.search import Request, choose_plan, evaluation_counts
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.probes.models import resolve_model
    from moeplan.profiles.backends import read_priors

    with evaluation_counts() as n:
        res = choose_plan(resolve_model(model), load_hardware(hw), read_priors("llama.cpp"), Request())
    assert n["estimate_runs"] == n["estimate_distinct"], n
    assert n["memory_runs"] == n["memory_distinct"], n
    # the search does ask again (the memo answers): the counts see every ask
    assert n["estimate"] > n["estimate_runs"] and n["memory"] > n["memory_runs"], n
    assert res.n_evaluated <= n["estimate_distinct"]


def test_memoised_estimate_is_the_estimate():
    from moeplan.planner.cost.estimate import estimate
    from moeplan.planner.memory.cache import plan_cache
    from moeplan.planner.search import Request, choose_plan
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.probes.models import resolve_model
    from moeplan.profiles.backends import read_priors

    hw, pr = load_hardware("desktop-4090-ddr5"), read_priors("llama.cpp")
    res = choose_plan(resolve_model("glm-4.5"), hw, pr, Request())
    fresh = estimate(resolve_model("glm-4.5"), res.best.placement, hw, pr)
    with plan_cache():
        again = estimate(resolve_model("glm-4.5"), res.best.placement, hw, pr)
    assert fresh == again == res.best.estimate


# ---- option values coerced without pydantic --------------------------------------------------

SAMPLES = ["0", "7", "-3", "4096", "007", "+5", " 5", "5 ", "1_000", "1.5", "-0.25", "1e3", ".5", "5.", "inf",
           "nan", "abc", "", "12k", "0x10", "99999999999999999999999"]


def _typer_params():
    import typer.main

    from moeplan.cli import app

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        for sub in getattr(cmd, "commands", {name: cmd}).values():
            yield from sub.params


def test_fast_coercion_agrees_with_typer():
    """Every value the fast path takes comes out as typer's pydantic adapter makes it."""
    from pydantic import ValidationError
    from typer._adapters import try_build_adapter

    seen = set()
    checked = 0
    for p in _typer_params():
        ann = p.type_descriptor.annotation
        if ann in seen or ann not in (str, int, float):
            continue
        seen.add(ann)
        adapter = try_build_adapter(ann, p.type_descriptor.parameter_info)
        for v in SAMPLES + [3, 2.5]:
            ok, got = fast_value(ann, v)
            if not ok:
                continue
            try:
                want = adapter.validate_python(v)
            except ValidationError:
                pytest.fail(f"fast path took {v!r} as {ann.__name__}; typer rejects it")
            assert (type(got), got) == (type(want), want), (ann, v)
            checked += 1
    assert seen == {str, int, float} and checked > 15


def test_a_bad_option_value_keeps_typers_message():
    out = subprocess.run([sys.executable, "-m", "moeplan", "tune", "glm-4.5", "--trials", "x"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert "Invalid value for '--trials'" in out.stderr and "valid integer" in out.stderr


# ---- main() builds only the named command's module ------------------------------------------

def test_command_map_matches_what_the_modules_register():
    import importlib

    import typer

    from moeplan import cli

    seen = {}
    for name in cli.MODULE_ORDER:
        app = typer.Typer()
        importlib.import_module(f"moeplan.commands.{name}").register(app)
        for c in app.registered_commands:
            seen[c.name] = name
        assert not app.registered_groups, name  # a sub-app would need its own entry
    assert seen == cli.COMMAND_MODULES
    assert [c.name for c in cli.app.registered_commands] == list(seen)


def test_tune_alone_builds_only_its_module():
    _, _, mods = _loaded(["tune", "glm-4.5", "--hw", "desktop-4090-ddr5", "--json"])
    assert "moeplan.commands.plan" in mods
    assert not {"moeplan.commands.bench", "moeplan.commands.tuner", "moeplan.commands.check"} & mods


# ---- a bundled profile is read alone ---------------------------------------------------------

def test_a_bundled_profile_is_read_from_its_own_file():
    """find_profile reads `<name>.toml` alone (parsing all 36 profiles was a third of a plan);
    that holds only while every profile's file is named after it."""
    from pathlib import Path

    from moeplan.profiles import model_profiles as mp

    for path in sorted(mp.PROFILE_DIR.glob("*.toml")):
        assert mp._read_profile(str(path))["name"] == path.stem, path
    mp.read_profiles.cache_clear()
    assert mp.find_profile("GLM-4.5")["name"] == "glm-4.5"
    assert mp.read_profiles.cache_info().misses == 0  # the name's own file answered
    assert mp.find_profile("glm-4.6")["name"] == "glm-4.5"  # an alias still searches them all
    assert mp.read_profiles.cache_info().misses == 1
    assert Path(mp.find_profile("kimi-k2")["_path"]).name == "kimi-k2.toml"


def test_the_default_contexts_first_try_builds_no_message(monkeypatch):
    """tune's default context is tried first and its InfeasibleError only caught: the message
    (a q4_0 estimate of the whole model) is built once, for the error a user sees, or never."""
    from moeplan.errors import InfeasibleError
    from moeplan.planner import search
    from moeplan.planner.search import DEFAULT_CTX_CAP, Request, choose_plan
    from moeplan.probes.hwprofile import load_hardware
    from moeplan.probes.models import resolve_model
    from moeplan.profiles.backends import read_priors

    calls = []
    real = search.infeasible
    monkeypatch.setattr(search, "infeasible", lambda *a, **k: calls.append(1) or real(*a, **k))
    req, pr = Request(ctx_cap=DEFAULT_CTX_CAP), read_priors("llama.cpp")
    res = choose_plan(resolve_model("glm-5.2"), load_hardware("desktop-3060-ddr4"), pr, req)
    assert "the largest that fits" in res.why[0] and not calls  # 32k failed, a smaller one fit
    with pytest.raises(InfeasibleError, match="q4_0 KV cache"):
        choose_plan(resolve_model("kimi-k3"), load_hardware("desktop-4090-ddr5"), pr, req)
    assert len(calls) == 1
