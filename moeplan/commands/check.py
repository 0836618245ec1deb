"""`moeplan check`: read llama.cpp-family logs and llama-bench output, compare with the plan."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from moeplan.commands.common import JsonOpt, command
from moeplan.commands.model import QuantOpt, SizeOpt
from moeplan.errors import InputError

PlanOpt = Annotated[Optional[Path], typer.Option("--plan", help="plan.json the run was launched from (default: "
                                                                "compare with the estimate of the log's own placement).")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="GGUF file or profile name when the log's model "
                                                                 "path is not on this machine.")]


def read_inputs(paths: list[str]) -> list[tuple[str, str]]:
    """(name, text) of each LOG_OR_JSON; '-' is stdin (read once). Raises InputError on a missing file."""
    out = []
    stdin_used = False
    for p in paths:
        if p == "-":
            if stdin_used:
                raise InputError("'-' given twice", "stdin can be read once; save the second log to a file")
            stdin_used = True
            out.append(("-", sys.stdin.read()))
            continue
        path = Path(p)
        if not path.is_file():
            raise InputError(f"{p}: no such file", "give a llama.cpp log, llama-bench output, or - for stdin")
        out.append((p, path.read_bytes().decode("utf-8", errors="replace")))
    return out


def model_for(run, plan, model_arg: str | None, quant: str | None = None, size: str | None = None):
    """The ModelSpec the log's run used: --model, else the plan's, else the path the log names."""
    from moeplan.probes.models import resolve_model

    if model_arg:
        return resolve_model(model_arg, quant=quant, size=size)
    if plan is not None:
        path, quant, size = plan.model.reopen_args()
        return resolve_model(path, quant=quant, size=size)
    if run.model_path and Path(run.model_path).is_file():
        return resolve_model(run.model_path)
    named = run.model_path or (run.bench[0].get("model_filename") if run.bench else "") or ""
    if named and Path(str(named)).is_file():
        return resolve_model(str(named))
    bundled = bundled_model_of(run, str(named), quant, size)
    if bundled is not None:
        return bundled
    raise InputError(f"{run.source}: the log's model {named or '(not named)'} is not on this machine",
                     "pass --model with the GGUF file or a profile name, or --plan with the plan it ran")


def _norm(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]", "", text.lower())


def bundled_model_of(run, named: str, quant: str | None, size: str | None):
    """The bundled profile the log's model is (its general.name, else its file name without the
    quant), read with the quant its file name says (or --quant); None when none matches. The
    spec carries a note saying it came from the log."""
    import re
    from dataclasses import replace

    from moeplan.planner.model.quants import ALIASES, QUANTS
    from moeplan.probes.models import resolve_model
    from moeplan.profiles.model_profiles import read_profiles

    stem = Path(named).name
    stem = re.sub(r"(-\d{5}-of-\d{5})?\.gguf$", "", stem)
    file_quant = next((q for q in sorted({*QUANTS, *ALIASES}, key=len, reverse=True)
                       if re.search(rf"(^|[-_.]){re.escape(q)}$", stem, re.IGNORECASE)), None)
    base = stem[: -len(file_quant) - 1] if file_quant else stem
    wanted = [_norm(x) for x in (run.model_meta.get("general.name") or "", base) if x]
    for prof in read_profiles().values():
        keys = {_norm(k) for k in [prof["name"], prof.get("display_name", ""), *prof.get("aliases", [])] if k}
        if any(w in keys for w in wanted):
            q = quant or file_quant
            spec = resolve_model(prof["name"], quant=q, size=size)
            how = f"the bundled profile {prof['name']} ({spec.quant})"
            return replace(spec, notes=spec.notes + (f"model from the log: {stem or named} is not on this machine; "
                                                      f"compared with {how}",))
    return None


LOG_META_KEYS = (("n_layer", "n_layers"), ("n_expert", "n_experts"), ("n_expert_used", "n_experts_used"),
                 ("n_head_kv", "n_head_kv"), ("n_embd_head_k", "head_dim_k"), ("n_embd_head_v", "head_dim_v"),
                 ("n_embd", "n_embd"), ("n_ctx_train", "n_ctx_train"))


def model_differences(run, model) -> list[str]:
    """What the log's own model metadata says that differs from the compared model."""
    out = []
    for log_key, attr in LOG_META_KEYS:
        raw = run.model_meta.get(log_key)
        if raw is None:
            continue
        try:
            logged = int(str(raw).split(",")[0].split()[0])
        except ValueError:
            continue
        ours = len(model.layers) if attr == "n_layers" else getattr(model, attr, None)
        if ours is not None and logged != ours:
            out.append(f"{log_key} {logged} in the log, {ours} in {model.name}")
    return out


def hardware_of(run, hw: str | None):
    """--hw, else the GPUs the log names (a spec profile from the parts catalog, the CPU side a
    common desktop, said in a note), else this machine."""
    from moeplan.probes.hwprofile import load_hardware

    if hw is not None or not run.devices:
        return load_hardware(hw)
    from moeplan.errors import InputError as _Input
    from moeplan.planner.hardware.spec import SpecRequest
    from moeplan.profiles import catalog

    names = [d.description for d in run.devices if d.description]
    if not names:
        return load_hardware(hw)
    gpu = names[0].replace("NVIDIA ", "").replace("GeForce ", "")
    try:
        prof = catalog.build_profile(SpecRequest(gpu=gpu, gpu_count=len(names), ram_bytes=128 * 1024**3))
    except _Input:
        return load_hardware(hw)
    from dataclasses import replace

    return replace(prof, notes=prof.notes + (
        f"hardware from the log: {len(names)} x {names[0]}; the CPU and RAM are not in the log (costed as a common "
        "desktop with 128 GiB): pass --hw for the machine it ran on",))


def check_one(name: str, text: str, plan, model_arg: str | None, hw_profile, quant: str | None = None,
              size: str | None = None):
    from moeplan.check.compare import compare_run
    from moeplan.check.parse import parse_log
    from moeplan.check.placement import recover_placement
    from moeplan.planner.memory.constants import memory_constants
    from moeplan.profiles.backends import read_priors

    run = parse_log(text, source=name)
    if run.tool == "unknown":
        raise InputError(f"{name}: no llama.cpp, ik_llama.cpp, llama-bench, KTransformers or SGLang figures found",
                         "give the program's full output (stderr too: 2>&1), or llama-bench -o json/jsonl/md")
    model = model_for(run, plan, model_arg, quant, size)
    if hw_profile is None or isinstance(hw_profile, str):
        hw_profile = hardware_of(run, hw_profile)
    rec = recover_placement(run, model, plan.placement if plan is not None else None)
    pr = read_priors(rec.placement.backend)
    consts = memory_constants(hw_profile, pr.name)
    res = compare_run(run, model, rec, hw_profile, pr, consts=consts,
                      plan_placement=plan.placement if plan is not None else None)
    notes = list(res.notes)
    logged = run.model_meta.get("general.name") or ""
    arch = run.model_meta.get("arch") or ""
    if arch and arch != model.arch:
        notes.insert(0, f"the log's model architecture is {arch}, the compared model's {model.arch}")
    diffs = model_differences(run, model)
    if diffs:
        notes.insert(0, "the log's model is not the compared one (" + "; ".join(diffs)
                     + "): memory and speed errors below compare different models")
    notes = [n for n in model.notes if n.startswith("model from the log")] + notes
    notes += [n for n in hw_profile.notes if n.startswith("hardware from the log")]
    if plan is not None and run.model_path and Path(run.model_path).name != Path(plan.model.path).name \
            and plan.model.source != "profile":
        notes.insert(0, f"the log loaded {run.model_path}, the plan is for {plan.model.path}"
                        + (f" ({logged})" if logged else ""))
    from dataclasses import replace

    return run, replace(res, notes=tuple(notes))


def register(app: typer.Typer) -> None:
    @app.command("check")
    @command
    def check_cmd(
        logs: Annotated[list[str], typer.Argument(help="llama.cpp / ik_llama.cpp / llama-bench / KTransformers / "
                                                       "SGLang output files, or - for stdin")],
        plan_path: PlanOpt = None,
        hw: Annotated[Optional[str], typer.Option("--hw", help="Hardware profile the run ran on (JSON, preset, or "
                                                               "this machine).")] = None,
        model: ModelOpt = None, quant: QuantOpt = None, size: SizeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Compare what a run used and measured (buffers per device, speeds) with the plan's prediction."""
        from moeplan.planfile import read_plan
        from moeplan.probes.hwprofile import load_hardware
        from moeplan.ui.console import emit_json, stdout_console

        plan = read_plan(plan_path) if plan_path is not None else None  # the one plan reader
        inputs = read_inputs(logs)
        profile = load_hardware(hw) if hw is not None else None  # None: the log's GPUs, else this machine
        results = [check_one(name, text, plan, model, profile, quant, size) for name, text in inputs]
        if as_json:
            emit_json({"logs": [{"parsed": run.to_dict(), "check": res.to_dict()} for run, res in results]})
            return
        from moeplan.ui.check_tables import check_render

        con = stdout_console()
        for _, res in results:
            con.print(check_render(res))
