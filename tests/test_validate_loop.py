"""tune --validate with a scripted runner: repeats, warm-up, outliers, load, budget, results
file, the leave-one-out guard and the JSON report. No subprocess, no sleeping: the runner
moves a fake clock."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from model_builders import toy_hw, toy_model, unit_priors

from moeplan.commands.validation import calibrate_and_replan, trial_placements
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.hardware.profile import Calibration
from moeplan.planner.search import Request, build_plan, choose_plan
from moeplan.tuner.calibrate import store_calibration
from moeplan.tuner.holdout import leave_one_out
from moeplan.tuner.results import read_results
from moeplan.tuner.runners import RunSettings
from moeplan.tuner.trials import Trial
from moeplan.tuner.validate import RunnerView, run_trials

MODEL = toy_model(n_layers=8, n_experts=16, k=4, n_embd=1024, n_ff_exp=512)
PR = unit_priors(eta_cpu=0.6, s_sync_s=100e-6, t_token_s=1e-3,
                 rel_err={"eta_gpu": 0.2, "eta_cpu": 0.3, "s_sync_s": 0.5, "pi_h2d": 0.3, "gpu_mfu": 0.3})
HW = toy_hw(vram_gib=2.0, ram_gib=64, cores=8)
REQ = Request(n_prompt=512)


def _plan():
    res = choose_plan(MODEL, HW, PR, REQ)
    return build_plan(MODEL, HW, res, "decode")


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Meter:
    """A load meter whose 'other processes' share comes from a script (by run index)."""

    def __init__(self, script):
        self.script = script
        self.i = -1
        self.loadavg_1m_before = 0.5

    def __call__(self):
        return self

    def start(self):
        self.i += 1
        return self

    def other_busy(self):
        return self.script(self.i)


def scripted_runner(clock, truth_hw=HW, wall_s=10.0, noise=0.02, seed=0, outlier_at=(), slow_first=True,
                    busy_factor=None):
    """Measured = the cost model on `truth_hw` x (1 + noise); run numbers in `outlier_at`
    measure a tenth; the first run (the warm-up) is slow; `busy_factor(i)` slows run i."""
    rng = random.Random(seed)
    calls = []

    def run_one(trial_plan, label, timeout_s):
        i = len(calls)
        calls.append((label, timeout_s))
        took = wall_s * (3 if slow_first and i == 0 else 1)
        if took > timeout_s:
            clock.t += timeout_s
            return Trial(label=label, placement=trial_plan.placement, runner="fake",
                         error=f"timed out after {timeout_s:.0f} s")
        clock.t += took
        e = estimate(MODEL, trial_plan.placement, truth_hw, PR, n_prompt=trial_plan.estimate and 256)
        f = 1.0 + rng.gauss(0, noise)
        if slow_first and i == 0:
            f *= 0.3
        if i in outlier_at:
            f *= 0.1
        if busy_factor:
            f *= busy_factor(i)
        return Trial(label=label, placement=trial_plan.placement, runner="fake",
                     measured_decode_tok_s=e.decode_tok_s * f, measured_prefill_tok_s=e.prefill_tok_s * f)
    return run_one, calls


def _run(tmp_path, run_one, clock, *, trials=4, budget_s=1000.0, meter=None, path="r.json", **kw):
    return run_trials(_plan(), MODEL, HW, PR, runner="fake",
                      candidates=trial_placements(_plan(), MODEL, HW, PR), trials=trials, budget_s=budget_s,
                      settings=RunSettings(prompt=256, timeout_s=600), results_path=tmp_path / path,
                      predict=lambda p: estimate(MODEL, p, HW, PR, n_prompt=256), run_one=run_one, clock=clock,
                      load_meter=meter or Meter(lambda i: 0.0), **kw)


def test_warmup_repeats_and_outlier_dropped(tmp_path):
    clock = Clock()
    run_one, calls = scripted_runner(clock, outlier_at=(3,))
    rep = _run(tmp_path, run_one, clock, trials=3)
    # run 0 is the warm-up (slow, not counted); every trial ran at least twice
    assert rep.trials and all(t.n_repeats >= 2 for t in rep.trials if t.ok)
    first = rep.trials[0]
    assert any(r.warmup for r in first.runs) is False  # the warm-up is not one of the trial's runs
    assert rep.n_runs == len(calls) and calls[0][0] == "plan"
    # run 3 measured a tenth: the trial it belongs to re-ran and dropped it, with a note
    hit = [t for t in rep.trials if any(r.dropped for r in t.runs)]
    assert len(hit) == 1 and hit[0].n_repeats >= 2 and len(hit[0].runs) >= 3
    assert any("dropped" in n for n in hit[0].notes)
    for t in rep.trials:
        kept = [r.decode_tok_s for r in t.runs if not r.dropped]
        assert t.measured_decode_tok_s == pytest.approx(sorted(kept)[len(kept) // 2], rel=0.05)
        assert t.decode_spread is not None and t.decode_spread < 0.3


def test_busy_runs_are_marked_and_dropped_when_idle_ones_exist(tmp_path):
    clock = Clock()
    # run 2 (the plan's second repeat) ran while others took the CPUs, and measured a third
    run_one, _ = scripted_runner(clock, busy_factor=lambda i: 0.33 if i == 2 else 1.0)
    rep = _run(tmp_path, run_one, clock, trials=2, meter=Meter(lambda i: 0.9 if i == 2 else 0.0))
    plan_trial = rep.trials[0]
    busy_runs = [r for r in plan_trial.runs if r.load.busy]
    assert len(busy_runs) == 1 and "busy" in busy_runs[0].dropped
    assert not plan_trial.busy and plan_trial.n_repeats >= 2
    # all runs busy: kept, and the trial is reported busy
    clock = Clock()
    run_one, _ = scripted_runner(clock)
    rep = _run(tmp_path, run_one, clock, trials=2, meter=Meter(lambda i: 0.9), path="r2.json")
    assert all(t.busy for t in rep.trials) and "busy" in rep.trials[0].load_note
    assert rep.to_dict()["busy_trials"] == len(rep.trials)


def test_budget_is_a_hard_limit(tmp_path):
    clock = Clock()
    run_one, calls = scripted_runner(clock, wall_s=20.0, slow_first=False)
    rep = _run(tmp_path, run_one, clock, trials=6, budget_s=75.0)
    # warm-up 20 s, two runs of 20 s; a fourth would need 23 s with 15 s left: not started
    assert len(calls) == 3 and clock.t <= 75.0
    assert "budget" in rep.stopped
    # a run that cannot finish in what is left is stopped at the limit and reported
    clock = Clock()
    run_one, calls = scripted_runner(clock, wall_s=50.0, slow_first=True)  # the warm-up takes 150 s
    rep = _run(tmp_path, run_one, clock, trials=6, budget_s=100.0, path="r2.json")
    assert clock.t <= 100.0 + 1e-9 and len(calls) == 1
    assert "budget" in rep.stopped and "stopped at the wall-time budget" in rep.trials[0].error


def test_results_are_appended_across_validations(tmp_path):
    clock = Clock()
    run_one, _ = scripted_runner(clock)
    rep1 = _run(tmp_path, run_one, clock, trials=2)
    rep2 = _run(tmp_path, run_one, clock, trials=3)
    plan, vals = read_results(tmp_path / "r.json")
    assert len(vals) == 2 and [len(v["trials"]) for v in vals] == [len(rep1.trials), len(rep2.trials)]
    assert all(v["started"] and v["finished"] for v in vals)
    assert len(rep2.all_trials) == len(rep1.trials) + len(rep2.trials)
    assert {t.validation for t in rep2.all_trials} == {vals[0]["started"], vals[1]["started"]} or \
        len({t.validation for t in rep2.all_trials}) >= 1


def _view():
    return RunnerView(MODEL, HW, PR)


def test_calibration_kept_when_it_improves_held_out_error(tmp_path):
    # the machine's CPU reads at half the prior's efficiency: every CPU-heavy trial is off the
    # same way, so a fit on the others predicts the held-out one better
    truth = store_calibration(HW, Calibration(factors={"eta_cpu": 0.3, "s_sync_s": 300e-6}, backend=PR.name))
    clock = Clock()
    run_one, _ = scripted_runner(clock, truth_hw=truth, noise=0.01)
    rep = _run(tmp_path, run_one, clock, trials=6)
    rep, new_hw = calibrate_and_replan(_plan(), MODEL, HW, PR, REQ, rep, _view())
    assert rep.calibration_accepted, rep.reason
    assert rep.loo_error_after < rep.loo_error_before
    assert new_hw.calibration_for(PR.name) is not None
    eta = next(f for f in rep.factors if f.name == "eta_cpu")
    assert eta.after < eta.before and eta.after == eta.fitted
    assert any("leave-one-trial-out" in n for n in rep.plan.notes)


def test_calibration_refused_when_it_does_not_improve_held_out_error(tmp_path):
    # the priors predict every trial exactly but one, a far-off trial: held-out error 0
    # cannot be beaten, so the fit (pulled by that trial) is refused and the priors stay
    clock = Clock()
    inner, _ = scripted_runner(clock, noise=0.0, slow_first=False)

    def run_one(trial_plan, label, timeout_s):
        t = inner(trial_plan, label, timeout_s)
        if label.startswith("+"):
            t = replace(t, measured_decode_tok_s=t.measured_decode_tok_s * 0.5,
                        measured_prefill_tok_s=t.measured_prefill_tok_s * 0.5)
        return t

    rep = _run(tmp_path, run_one, clock, trials=6)
    rep, new_hw = calibrate_and_replan(_plan(), MODEL, HW, PR, REQ, rep, _view())
    assert not rep.calibration_accepted
    assert rep.loo_error_after >= rep.loo_error_before
    assert "priors stay" in rep.reason
    assert new_hw is HW and rep.plan == _plan() and not rep.choice_changed
    assert all(f.after == f.before for f in rep.factors)


def test_json_report_fields_are_present_and_consistent(tmp_path):
    truth = store_calibration(HW, Calibration(factors={"eta_cpu": 0.3}, backend=PR.name))
    clock = Clock()
    run_one, _ = scripted_runner(clock, truth_hw=truth)
    rep = _run(tmp_path, run_one, clock, trials=4)
    rep, _ = calibrate_and_replan(_plan(), MODEL, HW, PR, REQ, rep, _view())
    doc = json.loads(json.dumps(rep.to_dict()))
    for key in ("trials", "loo_error_before", "loo_error_after", "calibration_accepted", "reason", "factors",
                "choice_changed"):
        assert key in doc, key
    assert len(doc["trials"]) == len(rep.trials)
    for t, x in zip(doc["trials"], rep.trials):
        for key in ("label", "predicted_decode_tok_s", "measured_decode_tok_s", "decode_spread",
                    "predicted_prefill_tok_s", "measured_prefill_tok_s", "prefill_spread", "n_repeats", "load"):
            assert key in t, key
        assert t["label"] == x.label and t["n_repeats"] == x.n_repeats
        assert t["measured_decode_tok_s"] == pytest.approx(x.measured_decode_tok_s, rel=1e-3)
    assert doc["calibration_accepted"] == (doc["loo_error_after"] < doc["loo_error_before"])
    for f in doc["factors"]:
        assert {"name", "before", "before_rel_err", "after", "after_rel_err"} <= set(f)
        if not doc["calibration_accepted"]:
            assert f["after"] == f["before"]


def test_holdout_guard_is_generic():
    # fit = the mean ratio measured/predicted; the observations share a 20% bias: accepted
    obs = [(x, 1.2 * x) for x in (1.0, 2.0, 3.0, 4.0)]
    fit = (lambda o: sum(m / p for p, m in o) / len(o))
    pred = (lambda s, o: [((s or 1.0) * o[0], o[1])])
    r = leave_one_out(obs, fit, pred)
    assert r.accepted and r.loo_error_after < 0.01 < r.loo_error_before and r.params == pytest.approx(1.2)
    # no bias, one wild observation: the fit hurts the others, refused
    obs = [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 40.0)]
    r = leave_one_out(obs, fit, pred)
    assert not r.accepted and r.params is None and "priors stay" in r.reason
    # too few groups to score
    assert not leave_one_out(obs[:2], fit, pred).accepted


def test_validate_plan_writes_the_calibrated_profile_when_kept(tmp_path, monkeypatch):
    # the whole validate_plan path past a kept calibration: the calibrated profile is written to
    # the cache, private (0600), and named in the report
    import os
    import stat

    from moeplan.tuner import validate as v

    truth = store_calibration(HW, Calibration(factors={"eta_cpu": 0.3, "s_sync_s": 300e-6}, backend=PR.name))
    clock = Clock()
    run_one, _ = scripted_runner(clock, truth_hw=truth, noise=0.01)
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(v, "require_runner", lambda runner: None)
    monkeypatch.setattr(v, "runner_view", lambda *a, **k: _view())
    monkeypatch.setattr(v, "run_trials", lambda *a, **k: _run(tmp_path, run_one, clock, trials=6))
    rep, _ = v.validate_plan(_plan(), MODEL, HW, PR, runner="executor", device="cpu", budget="10m")
    assert rep.calibration_accepted, rep.reason
    assert rep.profile_path and os.path.isfile(rep.profile_path)
    assert stat.S_IMODE(os.stat(rep.profile_path).st_mode) == 0o600
