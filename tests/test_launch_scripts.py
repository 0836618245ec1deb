"""Emitted scripts: valid bash, and bash hands each program exactly the argv that was built.

Fake programs (llama-server, numactl, python, vllm, ray ...) on PATH record the argv and
environment they receive, so the test checks the quoting end to end with nasty model paths.
"""
from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from launch_plans import make_plan, write_models

from moeplan.launch import EMITTERS, emit_launch, render_files, write_launch, write_launch_files
from moeplan.launch.common import Command, ShellVar, join
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement

GIB = 1024**3
FAKES = ("llama-server", "llama-completion", "llama-cli", "llama-bench", "numactl", "python", "vllm", "ray")


def fake_bin(folder: Path) -> Path:
    """Programs that write their argv (NUL-separated) and a few env vars to $ARGV_OUT, then exit 0."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FAKES:
        p = folder / name
        p.write_text('#!/usr/bin/env bash\n'
                     'printf "%s\\0" "$(basename "$0")" "$@" > "$ARGV_OUT"\n'
                     'printf "%s" "${GGML_OP_OFFLOAD_MIN_BATCH-}" > "$ARGV_OUT.env"\n'
                     'printf "%s" "${FAKE_STDOUT-}"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return folder


def run_script(script: Path, fakes: Path, out: Path, env_extra: dict | None = None,
               args=()) -> subprocess.CompletedProcess:
    env = {"PATH": f"{fakes}:{os.environ['PATH']}", "ARGV_OUT": str(out), "HOME": str(out.parent),
           **(env_extra or {})}
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=30,
                          cwd=str(out.parent))


def recorded(out: Path) -> list[str]:
    return out.read_bytes().decode().split("\0")[:-1]


PLACEMENTS = {
    "llama.cpp": Placement(cpu_moe_layers=(), n_ctx=16384, n_threads=32, numa="bind", numa_nodes=(0,),
                           cache_type_k="q8_0", cache_type_v="q8_0", load_mode="no-mmap",
                           options=PlanOptions(op_offload_min_batch="64")),
    "ik_llama.cpp": Placement(backend="ik_llama.cpp", n_ctx=8192, n_threads=24, n_ubatch=256, load_mode="mlock",
                              numa="interleave", numa_nodes=(0, 1)),
    "ktransformers": Placement(backend="ktransformers", n_ctx=8192, n_threads=48, numa="bind", numa_nodes=(0, 1),
                               n_gpus=2),
    "vllm": Placement(backend="vllm", n_ctx=32768, n_gpus=4, n_seq=4),
    "sglang": Placement(backend="sglang", n_ctx=32768, n_gpus=8),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models dir with space"))


def plans_for(models):
    """(backend, model key, plan, model) for every backend on every fixture model."""
    for backend, base in PLACEMENTS.items():
        for key, m in models.items():
            cpu = m.moe_layer_indices[1::2] if backend in ("llama.cpp", "ik_llama.cpp", "ktransformers") else ()
            yield backend, key, make_plan(m, replace(base, cpu_moe_layers=cpu)), m


@pytest.fixture(scope="module")
def emitted(models, tmp_path_factory):
    out = []
    for backend, key, plan, m in plans_for(models):
        folder = tmp_path_factory.mktemp(f"out {backend} {key}")
        launch, paths = write_launch(plan, m, folder, backend, n_nodes=1, gpu_vram_bytes=80 * GIB,
                                     programs=_release(backend))
        out.append((backend, key, launch, paths, folder))
    return out


def _release(backend):
    from moeplan.launch import release_programs

    return release_programs(backend)


def test_every_backend_emits_for_every_model(emitted):
    assert {(b, k) for b, k, *_ in emitted} == {(b, k) for b in EMITTERS for k in ("qwen3moe", "deepseek2", "gpt-oss")}
    for backend, _key, _launch, paths, _folder in emitted:
        names = {p.name for p in paths}
        assert {"launch.sh", "bench.sh", "plan.json", "launch.json"} <= names
        if backend in ("llama.cpp", "ik_llama.cpp"):
            assert "complete.sh" in names
        if backend == "vllm":
            assert "vllm.yaml" in names


def test_scripts_are_valid_bash_and_executable(emitted):
    for _backend, _key, _launch, paths, _folder in emitted:
        for p in paths:
            if p.suffix == ".sh":
                r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
                assert r.returncode == 0, (p, r.stderr)
                assert p.stat().st_mode & stat.S_IXUSR
                text = p.read_text()
                assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text


def test_bash_passes_exactly_the_built_argv(emitted, tmp_path):
    fakes = fake_bin(tmp_path / "fake bin")
    n_checked = 0
    for backend, _key, launch, _paths, folder in emitted:
        for s in launch.scripts:
            out = tmp_path / "argv"
            r = run_script(folder / s.name, fakes, out, {"MODEL": "/hf/My Model", "HEAD_ADDR": "10.0.0.1"},
                           args=("--extra", "it's"))
            if s.after and backend == "ik_llama.cpp":
                # ik's llama-bench exits 1 on a bad -ot itself; a JSON without override_tensor
                # (builds before 2026, or this fake's none) is a warning, not a failure
                assert r.returncode == 0 and "override_tensor; the -ot overrides are unchecked" in r.stderr
            elif s.after:  # bench.sh checks llama-bench's JSON: the fake printed none, so it must fail
                assert r.returncode == 1 and "did not run with the plan's -ot overrides" in r.stderr
            else:
                assert r.returncode == 0, (backend, s.name, r.stderr)
            want = [str(t) for t in s.command.full_argv]
            want = [t.replace("${MODEL}", "/hf/My Model").replace("${HEAD_ADDR}", "10.0.0.1") for t in want]
            got = recorded(out)
            assert Path(got[0]).name == Path(want[0]).name
            assert got[1:] == want[1:] + ["--extra", "it's"], (backend, s.name)
            env = dict(s.command.env)
            assert (out.parent / "argv.env").read_text() == env.get("GGML_OP_OFFLOAD_MIN_BATCH", "")
            n_checked += 1
    assert n_checked >= 30


def test_bench_sh_passes_when_llama_bench_reports_the_overrides(emitted, tmp_path):
    fakes = fake_bin(tmp_path / "fakes")
    for backend, _key, launch, _paths, folder in emitted:
        if backend != "llama.cpp":
            continue
        bench = launch.script("bench.sh")
        report = [{"tensor_buft_overrides": launch.bench_overrides, "avg_ts": 1.0}] * 2
        fake_out = "error: noise before the JSON\n" + json.dumps(report, indent=4)
        r = run_script(folder / "bench.sh", fakes, tmp_path / "argv", {"FAKE_STDOUT": fake_out})
        assert r.returncode == 0, r.stderr
        assert json.loads((folder / "bench.json").read_text().split("\n", 1)[1]) == report
        assert bench.stdout_to == "bench.json"


def test_a_script_stops_when_a_required_variable_is_unset(models, tmp_path):
    m = replace(models["qwen3moe"], source="profile", path="")
    plan = make_plan(m, Placement(cpu_moe_layers=(1,)), path="qwen3-30b-a3b")
    paths = write_launch_files(plan, m, tmp_path / "o", "llama.cpp", programs=_release("llama.cpp"))
    launch_sh = next(p for p in paths if p.name == "launch.sh")
    r = run_script(launch_sh, fake_bin(tmp_path / "f"), tmp_path / "argv")
    assert r.returncode != 0 and "set MODEL to the GGUF file of" in r.stderr
    r = run_script(launch_sh, fake_bin(tmp_path / "f"), tmp_path / "argv", {"MODEL": "/m/a b.gguf"})
    assert r.returncode == 0 and recorded(tmp_path / "argv")[2] == "/m/a b.gguf"


NASTY = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40)


@given(st.lists(NASTY, min_size=1, max_size=6))
def test_join_round_trips_through_shlex_split(tokens):
    assert shlex.split(join(tokens)) == tokens


def test_shell_vars_round_trip_and_expand():
    argv = ["prog", ShellVar("MODEL"), "--addr", ShellVar("HEAD_ADDR", ":5000"), "it's $HOME"]
    assert shlex.split(join(argv)) == ["prog", "${MODEL}", "--addr", "${HEAD_ADDR}:5000", "it's $HOME"]
    r = subprocess.run(["bash", "-c", 'printf "%s\\n" ' + join(argv[1:])], capture_output=True, text=True,
                       env={"MODEL": "a b", "HEAD_ADDR": "h", "HOME": "/home/x"})
    assert r.stdout.splitlines() == ["a b", "--addr", "h:5000", "it's $HOME"]
    with pytest.raises(ValueError):
        ShellVar("MODEL", '"; rm -rf /')


def test_command_shell_line_round_trips(models):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(cpu_moe_layers=(0, 1), options=PlanOptions(op_offload_min_batch="128")))
    launch = emit_launch(plan, m, "llama.cpp", model_path="/m/it's a \"model\" $x `y`.gguf")
    cmd: Command = launch.script("launch.sh").command
    line = cmd.shell()
    assert line.startswith("GGML_OP_OFFLOAD_MIN_BATCH=128 ")
    assert shlex.split(line)[1:] == [str(t) for t in cmd.full_argv]


def test_files_are_written_atomically_and_plan_json_is_the_plan(models, tmp_path):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(cpu_moe_layers=(2, 3)))
    out = tmp_path / "emit"
    paths = write_launch_files(plan, m, out, programs=_release("llama.cpp"))
    assert (out / "plan.json").read_text() == plan.to_json()
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "no temp files left"
    doc = json.loads((out / "launch.json").read_text())
    assert doc["plan_digest"] == plan.inputs_digest()
    assert doc["scripts"]["launch.sh"]["argv"][0] == "llama-server"
    # a second emit replaces the files in place (same content: the plan is deterministic)
    before = {p.name: p.read_text() for p in paths}
    write_launch_files(plan, m, out, programs=_release("llama.cpp"))
    assert {p.name: p.read_text() for p in paths} == before


def test_render_is_deterministic(models):
    m = models["deepseek2"]
    plan = make_plan(m, Placement(cpu_moe_layers=m.moe_layer_indices[:3]))
    a = render_files(plan, m, emit_launch(plan, m, "llama.cpp", model_path="/m.gguf"))
    b = render_files(plan, m, emit_launch(plan, m, "llama.cpp", model_path="/m.gguf"))
    assert a == b


def test_multi_node_scripts_pass_their_argv(models, tmp_path):
    m = models["deepseek2"]
    fakes = fake_bin(tmp_path / "fakes")
    plan = make_plan(m, Placement(n_gpus=8, n_ctx=32768))
    for backend in ("vllm", "sglang"):
        launch, _ = write_launch(plan, m, tmp_path / backend, backend, n_nodes=3, gpu_vram_bytes=80 * GIB,
                                 programs=_release(backend))
        assert len(launch.scripts) >= 4
        for s in launch.scripts:
            path = tmp_path / backend / s.name
            assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
            r = run_script(path, fakes, tmp_path / "argv")
            if s.requires:  # HEAD_ADDR / MODEL unset: the guard stops the script with its message
                assert r.returncode != 0 and f"set {s.requires[0][0]} to" in r.stderr
            r = run_script(path, fakes, tmp_path / "argv", {"HEAD_ADDR": "10.1.2.3", "MODEL": "/hf/ds"})
            assert r.returncode == 0, r.stderr
            want = [str(t).replace("${HEAD_ADDR}", "10.1.2.3").replace("${MODEL}", "/hf/ds")
                    for t in s.command.full_argv]
            assert recorded(tmp_path / "argv")[1:] == want[1:]
