"""Runners: measure one placement as a subprocess and return a Trial.

executor     `python -m moeplan bench MODEL --plan trial.json --json` (always available; big
             models run a sample of layers and extrapolate), with the plan's numactl prefix.
llama-bench  the command launch/ emits for the plan (bench.sh), parsed from `-o json`, and
             checked to have run with the plan's tensor overrides (it silently drops an
             unknown buffer type and exits 0).

A timeout, a crash or a missing binary becomes a Trial with `error` set: the loop keeps
what it has and says what failed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from moeplan.errors import MoeplanError, RunnerError
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.plan import Plan
from moeplan.tuner.trials import Trial

RUNNERS = ("executor", "llama-bench")


@dataclass(frozen=True)
class RunSettings:
    tokens: int = 16  # decode tokens to time
    prompt: int = 512  # prompt tokens for the prefill figure
    sample_layers: int = 0  # executor: 0 = decide from the model's size
    timeout_s: float = 300.0
    device: str = ""  # executor: '' = cuda when available
    dtype: str = "bf16"  # executor: the torch dtype its weights are held in
    binary: str | None = None  # llama-bench, or the folder holding it
    model_path: str = ""  # the GGUF llama-bench loads


def _model_arg(plan: Plan) -> list[str]:
    path, quant, size = plan.model.reopen_args()
    return [path] + (["--quant", quant] if quant else []) + (["--size", size] if size else [])


def _tail(text: str, n: int = 300) -> str:
    text = (text or "").strip()
    return text[-n:] if len(text) > n else text


def run_executor(plan: Plan, label: str, s: RunSettings) -> Trial:
    """Run the bundled executor on `plan` in a child process."""
    from moeplan.launch.numa import numa_prefix

    with tempfile.TemporaryDirectory(prefix="moeplan-trial-") as tmp:
        path = Path(tmp) / "plan.json"
        path.write_text(plan.to_json())
        argv = [sys.executable, "-m", "moeplan", "bench", *_model_arg(plan), "--plan", str(path), "--json",
                "--tokens", str(s.tokens), "--prompt", str(s.prompt)]
        if s.sample_layers:
            argv += ["--sample-layers", str(s.sample_layers)]
        if s.device:
            argv += ["--device", s.device]
        argv += ["--dtype", s.dtype]
        prefix = list(numa_prefix(plan.placement))
        if prefix and not _have(prefix[0]):
            prefix = []
        t0 = time.perf_counter()
        try:
            out = _run(prefix + argv, s.timeout_s, {**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return _failed(plan, label, "executor", f"timed out after {s.timeout_s:.0f} s", time.perf_counter() - t0)
        wall = time.perf_counter() - t0
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        return _failed(plan, label, "executor", f"crashed (exit {out.returncode}): {_tail(out.stderr)}", wall)
    if "error" in doc:
        return _failed(plan, label, "executor", doc["error"].get("message", "failed"), wall)
    return Trial(label=label, placement=plan.placement, runner="executor", n_prompt=s.prompt,
                 measured_decode_tok_s=doc.get("decode_tok_s") or None,
                 measured_prefill_tok_s=doc.get("prefill_tok_s") or None,
                 measured_vram_bytes=doc.get("peak_vram_bytes") or None,
                 predicted_decode_tok_s=plan.estimate.decode_tok_s, predicted_prefill_tok_s=plan.estimate.prefill_tok_s,
                 wall_s=wall, extra={"sampled_layers": doc.get("sampled_layers"), "extrapolated": doc.get("extrapolated"),
                                     "device": doc.get("executor", {}).get("device", ""),
                                     "dtype": doc.get("executor", {}).get("dtype", s.dtype)})


def run_llama_bench(plan: Plan, model: ModelSpec, label: str, s: RunSettings) -> Trial:
    """Run llama-bench with the plan's emitted command and parse its JSON."""
    from moeplan.launch import emit_launch, find_programs
    from moeplan.launch.benchjson import check_bench_overrides

    if not s.model_path or not Path(s.model_path).exists():
        raise RunnerError("llama-bench needs the real GGUF file of the plan",
                          "plan from the .gguf file itself (moeplan tune /path/model.gguf) or use --runner executor")
    try:
        programs = find_programs("llama.cpp", s.binary)
        launch = emit_launch(plan, model, "llama.cpp", programs, model_path=s.model_path)
    except MoeplanError:
        raise
    bench = launch.script("bench.sh")
    argv = [str(a) for a in bench.command.full_argv]
    if not programs.programs.get("bench") and not s.binary:
        raise RunnerError("llama-bench not found on PATH", "install llama.cpp or pass --bin /path/to/llama-bench")
    env = {**os.environ, **{k: str(v) for k, v in bench.command.env}}
    records, wall, why = _bench_records(argv, env, s.timeout_s)
    if why:
        return _failed(plan, label, "llama-bench", why, wall)
    problems = check_bench_overrides(records, launch.bench_overrides)
    if problems:
        return _failed(plan, label, "llama-bench", "; ".join(problems), wall)
    tg = [r.get("avg_ts") for r in records if r.get("n_gen") and not r.get("n_prompt")]
    pp = [r.get("avg_ts") for r in records if r.get("n_prompt") and not r.get("n_gen")]
    n_prompt = next((r["n_prompt"] for r in records if r.get("n_prompt") and not r.get("n_gen")), s.prompt)
    return Trial(label=label, placement=plan.placement, runner="llama-bench", n_prompt=n_prompt,
                 measured_decode_tok_s=tg[0] if tg else None, measured_prefill_tok_s=pp[0] if pp else None,
                 predicted_decode_tok_s=plan.estimate.decode_tok_s,
                 predicted_prefill_tok_s=plan.estimate.prefill_tok_s, wall_s=wall)


def _bench_records(argv: list[str], env: dict, timeout_s: float) -> tuple[list[dict], float, str]:
    """Run one llama-bench process: (its JSON records, wall seconds, '' or why it gave none)."""
    from moeplan.launch.benchjson import parse_bench_json

    t0 = time.perf_counter()
    try:
        out = _run(argv, timeout_s, env)
    except FileNotFoundError:
        raise RunnerError(f"cannot run {argv[0]}", "pass --bin with the folder of llama-bench") from None
    except subprocess.TimeoutExpired:
        return [], time.perf_counter() - t0, f"timed out after {timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    if out.returncode:
        return [], wall, f"exit {out.returncode}: {_tail(out.stderr)}"
    try:
        return parse_bench_json(out.stdout), wall, ""
    except RunnerError as err:
        return [], wall, err.message


def _run(argv: list[str], timeout_s: float, env: dict) -> subprocess.CompletedProcess:
    """subprocess.run in its own process group, so a timeout kills the whole tree (a runner's
    children would otherwise keep the pipes open until they finish)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    except KeyboardInterrupt:
        import signal

        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _failed(plan: Plan, label: str, runner: str, why: str, wall: float) -> Trial:
    return Trial(label=label, placement=plan.placement, runner=runner, error=why, wall_s=wall,
                 predicted_decode_tok_s=plan.estimate.decode_tok_s,
                 predicted_prefill_tok_s=plan.estimate.prefill_tok_s)


def _have(program: str) -> bool:
    from shutil import which

    return which(program) is not None


# ---- several trials in one llama-bench process ----------------------------------------------

SWEEP_FLAGS = ("-t", "-ot", "-p", "-n")  # what a sweep sets; every other flag stays the plan's


def sweep_argv(argv: list[str], threads: list[int], override_sets: list[str], prompts: list[int],
               n_gen: int, repeats: int = 3) -> list[str]:
    """bench.sh's llama-bench argv with comma lists: `-t a,b`, one `-ot` per CPU-layer set,
    `-p x,y`, so every combination runs in one process (llama-bench reloads the model only when
    the overrides change; a thread count or a prompt length only makes a new context)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in SWEEP_FLAGS + ("-r",) and i + 1 < len(argv):
            skip = True
            continue
        out.append(a)
    out += ["-t", ",".join(str(t) for t in threads)]
    for ot in override_sets:
        out += ["-ot", ot]
    out += ["-p", ",".join(str(p) for p in prompts), "-n", str(n_gen), "-r", str(repeats)]
    return out


def trials_of_sweep(records: list[dict], points: list[tuple[str, Plan, str]], prompts: list[int],
                    predict_at) -> list[Trial]:
    """One Trial per (point, prompt length) from a sweep's records. `points`: (label, plan,
    its llama-bench override string); a record belongs to the point with its thread count and
    overrides. The decode figure goes with the longest prompt's trial. `predict_at(placement,
    n_prompt)` gives the Estimate the trial is compared with."""
    out = []
    for label, plan, ot in points:
        p = plan.placement
        mine = [r for r in records if r.get("n_threads") == p.n_threads and r.get("tensor_buft_overrides") == ot]
        tg = next((r for r in mine if r.get("n_gen") and not r.get("n_prompt")), None)
        for n_prompt in sorted(prompts):
            pp = next((r for r in mine if r.get("n_prompt") == n_prompt and not r.get("n_gen")), None)
            if pp is None and (tg is None or n_prompt != max(prompts)):
                continue
            e = predict_at(p, n_prompt)
            rec = pp or tg or {}
            reps = int(rec.get("n_reps", 0) or len(rec.get("samples_ts", [])))
            with_decode = n_prompt == max(prompts) and tg is not None
            lab = label if n_prompt == max(prompts) else f"{label}, prompt {n_prompt}"
            out.append(Trial(label=lab, placement=p, runner="llama-bench", n_prompt=n_prompt,
                             measured_decode_tok_s=tg.get("avg_ts") if tg is not None and with_decode else None,
                             measured_prefill_tok_s=pp.get("avg_ts") if pp else None,
                             decode_spread=_rel_sd(tg) if with_decode else None,
                             prefill_spread=_rel_sd(pp) if pp else None,
                             predicted_decode_tok_s=e.decode_tok_s if with_decode else None,
                             predicted_prefill_tok_s=e.prefill_tok_s, n_repeats=reps))
    return out


def _rel_sd(r: dict | None) -> float | None:
    if not r or not r.get("avg_ts"):
        return None
    return float(r.get("stddev_ts", 0.0)) / float(r["avg_ts"])


def run_llama_bench_sweep(points: list[tuple[str, Plan]], model: ModelSpec, s: RunSettings, prompts: list[int],
                          predict_at) -> tuple[list[Trial], float, str]:
    """Run the trial placements `points` (the plan first; they differ in threads and CPU
    layers only) in one llama-bench process: (trials, wall seconds, error or '')."""
    from moeplan.launch import emit_launch

    if not s.model_path or not Path(s.model_path).exists():
        raise RunnerError("llama-bench needs the real GGUF file of the plan",
                          "plan from the .gguf file itself (moeplan tune /path/model.gguf) or use --runner executor")
    from moeplan.launch.binaries import find_llama_programs
    from moeplan.launch.llamacpp import release_flags

    # only llama-bench runs here: a --bin folder without llama-server will do
    programs = find_llama_programs("llama.cpp", s.binary, release_flags(), need_server=False)
    if not programs.programs.get("bench") and not s.binary:
        raise RunnerError("llama-bench not found on PATH", "install llama.cpp or pass --bin /path/to/llama-bench")
    base = points[0][1]
    launch = emit_launch(base, model, "llama.cpp", programs, model_path=s.model_path)
    bench = launch.script("bench.sh")
    tagged = []
    seen = set()
    for label, plan in points:
        ot = emit_launch(plan, model, "llama.cpp", programs, model_path=s.model_path).bench_overrides
        if (plan.placement.n_threads, ot) in seen:
            continue  # the same run for llama-bench (CPU layers of a CPU-only run: every weight is on the CPU)
        seen.add((plan.placement.n_threads, ot))
        tagged.append((label, plan, ot))
    threads = sorted({plan.placement.n_threads for _, plan, _ in tagged})
    sets = list(dict.fromkeys(ot for _, _, ot in tagged if ot != "none"))
    argv = sweep_argv([str(a) for a in bench.command.full_argv], threads, sets, prompts, s.tokens)
    env = {**os.environ, **{k: str(v) for k, v in bench.command.env}}
    records, wall, why = _bench_records(argv, env, s.timeout_s)
    if why:
        return [], wall, f"llama-bench: {why}"
    trials = trials_of_sweep(records, tagged, prompts, predict_at)
    if not trials:
        return [], wall, "llama-bench ran none of the trial placements (were the -ot overrides dropped?)"
    return [replace(t, wall_s=wall / max(1, len(trials))) for t in trials], wall, ""
