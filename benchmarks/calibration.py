"""Calibration on this machine with the executor runner, idle and with a busy neighbour.

Writes a small qwen3moe-shaped GGUF and runs `tune --validate`'s loop on it (warm-up,
repeated runs, load per run, the plan and its neighbours, calibration guarded by the
leave-one-trial-out error), twice: once as the machine is, and once with a CPU-busy
background process (one spinning Python process per CPU) during part of the run. Prints,
for each pass, the leave-one-trial-out error before and after calibration, whether the
calibration was kept, the trials and runs, the wall time and the load the runs saw. The
machine is shared: read the load figures before the errors.

    python benchmarks/calibration.py [--budget 150] [--trials 5] [--busy-from 0.3 --busy-to 0.7]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from gguf_fixtures import write_qwen3moe  # noqa: E402

from moeplan.planner.search import Request, build_plan, choose_plan  # noqa: E402
from moeplan.probes.gguf_model import read_gguf_model  # noqa: E402
from moeplan.probes.hwprofile import load_hardware  # noqa: E402
from moeplan.profiles.backends import read_priors  # noqa: E402
from moeplan.tuner.runners import RunSettings  # noqa: E402
from moeplan.tuner.validate import calibrate_and_replan, run_trials, runner_view  # noqa: E402


def _spin(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def busy_neighbour(start_s: float, stop_s: float) -> threading.Thread:
    """From start_s to stop_s seconds from now, one spinning process per CPU."""
    def run():
        time.sleep(start_s)
        procs = [mp.Process(target=_spin, args=(time.time() + stop_s - start_s,)) for _ in range(os.cpu_count() or 1)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def one_pass(name: str, model, hw, a, folder: Path, busy: tuple[float, float] | None) -> None:
    pr = read_priors("llama.cpp")
    req = Request(n_prompt=a.prompt, threads=a.threads)
    plan = build_plan(model, hw, choose_plan(model, hw, pr, req), "decode")
    view = runner_view("executor", model, hw, pr, "cpu", a.dtype)
    settings = RunSettings(tokens=a.tokens, prompt=a.prompt, device="cpu", dtype=a.dtype, timeout_s=300)
    if busy:
        busy_neighbour(busy[0] * a.budget, busy[1] * a.budget)
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    rep = run_trials(plan, view.model, hw, pr, runner="executor", trials=a.trials, budget_s=a.budget,
                     settings=settings, results_path=folder / f"results-{name}.json",
                     predict=lambda p: view.predict(p, a.prompt),
                     on_trial=lambda t: print(f"  {t.label:16} decode {t.measured_decode_tok_s or 0:.2f} "
                                              f"(pred {t.predicted_decode_tok_s or 0:.2f}) prefill "
                                              f"{t.measured_prefill_tok_s or 0:.1f} (pred "
                                              f"{t.predicted_prefill_tok_s or 0:.1f}) x{t.n_repeats} "
                                              f"{t.load_note}{' ' + t.error if t.error else ''}", flush=True))
    rep.device = "cpu"
    rep, _ = calibrate_and_replan(plan, model, hw, pr, req, rep, view)
    wall = time.perf_counter() - t0
    shares = [r.load.other_cpu_busy for t in rep.trials for r in t.runs if r.load.other_cpu_busy is not None]
    fmt = (lambda x: "n/a" if x is None else f"{x:.1%}")
    print(f"{name}: {len(rep.trials)} trials, {rep.n_runs} runs (warm-up included), {wall:.0f} s wall "
          f"(budget {a.budget:.0f} s); stopped: {rep.stopped}")
    print(f"{name}: load average {load0:.1f} at the start on {os.cpu_count()} CPUs; other processes used "
          f"{min(shares, default=0) * (os.cpu_count() or 1):.1f}-{max(shares, default=0) * (os.cpu_count() or 1):.1f} "
          f"CPUs during the runs; {len(rep.busy_trials)} of {len(rep.trials)} trials busy")
    print(f"{name}: leave-one-trial-out error before {fmt(rep.loo_error_before)}, after {fmt(rep.loo_error_after)}; "
          f"calibration {'kept' if rep.calibration_accepted else 'not kept'}: {rep.reason}\n", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds per pass")
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--busy-from", type=float, default=0.3, help="share of the budget the neighbour starts at")
    ap.add_argument("--busy-to", type=float, default=0.7)
    ap.add_argument("--skip-idle", action="store_true")
    a = ap.parse_args(argv)
    hw = load_hardware(None)  # this machine (cached probe, or a quick one)
    with tempfile.TemporaryDirectory(prefix="moeplan-cal-") as tmp:
        path, _ = write_qwen3moe(Path(tmp) / "cal.gguf", n_layer=8, n_embd=1024, n_head=8, n_head_kv=2,
                                 head_dim=128, n_expert=32, n_used=4, n_ff_exp=768, n_vocab=32000)
        model = read_gguf_model(path)
        print(f"model: {model.name} {model.loaded_bytes / 1e9:.2f} GB as GGUF; machine: {hw.name}\n")
        if not a.skip_idle:
            one_pass("as-is", model, hw, a, Path(tmp), None)
        one_pass("busy-neighbour", model, hw, a, Path(tmp), (a.busy_from, a.busy_to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
