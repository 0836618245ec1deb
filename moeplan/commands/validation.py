"""`tune --validate` as a flow: the planner names the trial placements, the tuner runs them and
calibrates (reading only the plan), and the search runs again here with a kept calibration."""
from __future__ import annotations

from dataclasses import replace


def trial_placements(plan, model, hw, pr):
    """The plan and its most informative neighbours (planner/search.py validation_trials)."""
    from moeplan.planner.search import validation_trials

    vram = sum((g.vram_free_bytes or g.vram_bytes) for g in hw.gpus)
    return validation_trials(model, plan.placement, hw, pr, vram, hw.ram_bytes)


def replan(plan, model, new_hw, pr, req, report):
    """With a kept calibration: search again on the calibrated profile and say whether the
    choice stands. Fills report.plan, report.choice_changed and report.replanned."""
    from moeplan import __version__
    from moeplan.planner.cost.estimate import estimate
    from moeplan.planner.search import build_plan, choose_plan

    new = choose_plan(model, new_hw, pr, req)
    before = estimate(model, plan.placement, new_hw, pr, n_prompt=req.n_prompt)
    after = new.best.estimate
    report.choice_changed = new.best.placement != plan.placement
    if not report.choice_changed:
        report.replanned = f"the choice stands (recalibrated: {after.decode_tok_s:.1f} tok/s decode)"
    else:
        gain = after.decode_tok_s / max(1e-9, before.decode_tok_s) - 1
        report.replanned = (f"the choice changed: {len(new.best.placement.cpu_moe_layers)} CPU layers, "
                            f"ubatch {new.best.placement.n_ubatch}, numa {new.best.placement.numa}: "
                            f"{after.decode_tok_s:.1f} tok/s against {before.decode_tok_s:.1f} ({gain:+.0%})")
    new_plan = build_plan(model, new_hw, new, plan.objective, plan.model.size_arg, moeplan_version=__version__)
    new_plan = replace(new_plan, workload=plan.workload)
    report.plan = replace(new_plan, notes=new_plan.notes + (report.calibration_summary, report.replanned))
    return report


def calibrate_and_replan(plan, model, hw, pr, req, report, view):
    """Calibrate on the report's trials (tuner/validate.py calibrate_report) and, when the
    calibration is kept, re-plan with it: (report, the calibrated profile or hw)."""
    from moeplan.tuner.validate import calibrate_report

    report, new_hw = calibrate_report(plan, hw, report, view)
    if report.calibration_accepted and new_hw is not hw:
        report = replan(plan, model, new_hw, pr, req, report)
    return report, new_hw
