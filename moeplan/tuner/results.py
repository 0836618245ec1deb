"""The results file of `tune --validate`: every run of every validation of one plan on one
machine, appended (never overwritten), each validation with its time stamps.

    {"plan": {...}, "validations": [{"started": ISO, "finished": ISO, "runner": ..., "stopped": ...,
                                     "budget_s": ..., "trials": [Trial, ...]}, ...]}

Files of earlier moeplan versions ({"plan", "trials", "stopped"}) read as one validation.
"""
from __future__ import annotations

import json
from pathlib import Path

from moeplan.errors import InputError
from moeplan.planner.plan import Plan
from moeplan.tuner.trials import Trial


def trial_to_dict(t: Trial) -> dict:
    from moeplan.planner.serde import to_jsonable

    return to_jsonable(t)


def trial_from_dict(d: dict) -> Trial:
    from moeplan.planner.serde import from_jsonable

    return from_jsonable(Trial, d)


def read_results(path: Path) -> tuple[Plan, list[dict]]:
    """(plan, validations) of a results file; a one-line InputError when it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
        plan = Plan.from_dict(doc["plan"])
        if "validations" in doc:
            vals = [dict(v, trials=[trial_from_dict(t) for t in v["trials"]]) for v in doc["validations"]]
        else:
            vals = [{"started": "", "finished": "", "stopped": doc.get("stopped", ""),
                     "trials": [trial_from_dict(t) for t in doc["trials"]]}]
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "pass the results file tune --validate wrote") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: not a moeplan results file ({exc})",
                         "pass the results-*.json that tune --validate wrote") from None
    return plan, vals


def all_trials(validations: list[dict]) -> list[Trial]:
    """Every trial of every validation, stamped with the validation it belongs to."""
    from dataclasses import replace

    return [replace(t, validation=t.validation or v.get("started", "")) for v in validations for t in v["trials"]]


class ResultsFile:
    """Appends one validation to the file, rewriting it atomically as each trial lands."""

    def __init__(self, path: Path, plan: Plan, meta: dict):
        self.path = Path(path)
        self.plan = plan
        self.earlier: list[dict] = []
        self.note = ""
        if self.path.exists():
            try:
                _, self.earlier = read_results(self.path)
            except InputError as err:
                self.note = f"{err.message}: started a new one (the old file is kept as {self.path.name}.bad)"
                self.path.rename(self.path.with_name(self.path.name + ".bad"))
        self.meta = dict(meta)

    def write(self, trials: list[Trial], stopped: str, finished: str = "") -> None:
        from moeplan.io import write_text_atomic

        def enc(v: dict) -> dict:
            return {**v, "trials": [trial_to_dict(t) for t in v["trials"]]}

        cur = {**self.meta, "finished": finished, "stopped": stopped, "trials": trials}
        doc = {"plan": self.plan.to_dict(), "validations": [enc(v) for v in self.earlier] + [enc(cur)]}
        write_text_atomic(self.path, json.dumps(doc, indent=2, sort_keys=True) + "\n")

    def all_trials(self, current: list[Trial]) -> list[Trial]:
        return all_trials(self.earlier + [{**self.meta, "trials": current}])
