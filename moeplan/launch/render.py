"""Shell text of the emitted scripts: header, guards, environment and the command.

Each argv element is quoted on its own (common.quote), one flag per line joined by `\\`
continuations, so `bash` sees exactly the argv the emitter built.
"""
from __future__ import annotations

from moeplan import __version__
from moeplan.launch.common import GIB, Launch, Script, join, quote
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.plan import Plan


def _layer_ranges(indices: tuple[int, ...]) -> str:
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def placement_summary(cpu: tuple[int, ...], model: ModelSpec) -> str:
    n_moe = len(model.moe_layer_indices)
    if not cpu:
        return f"all {n_moe} MoE layers keep their experts on the GPU"
    return (f"routed experts of blocks {_layer_ranges(tuple(cpu))} on the CPU "
            f"({len(cpu)} of {n_moe} MoE layers), everything else on the GPU")


def header_lines(plan: Plan, model: ModelSpec, launch: Launch, script: Script) -> list[str]:
    e = plan.estimate
    lines = [
        f"{script.name}: {script.purpose}",
        f"written by moeplan {__version__} from plan {plan.inputs_digest()} "
        f"(objective {plan.objective}, hardware {plan.hardware_name or 'unnamed'})",
        f"model: {model.name} ({model.quant}, {model.arch})",
        f"predicted: VRAM {e.vram_bytes / GIB:.1f} GiB, RAM {e.ram_bytes / GIB:.1f} GiB, "
        f"decode {e.decode_tok_s:.1f} tok/s ({e.decode_tok_s_range[0]:.1f}-{e.decode_tok_s_range[1]:.1f}), "
        f"prefill {e.prefill_tok_s:.0f} tok/s"
        + (f" (plan made for {plan.placement.backend})" if plan.placement.backend != launch.backend else ""),
        f"placement: {launch.placement_text or placement_summary(launch.cpu_layers, model)}",
        f"flags for: {launch.target}",
    ]
    lines += [f"note: {n}" for n in launch.notes]
    return ["# " + _comment(line) for line in lines]


def _comment(text: str) -> str:
    """One comment line: control characters (a newline in a model name) become spaces."""
    return "".join(c if c.isprintable() else " " for c in text)


def _command_lines(script: Script) -> list[str]:
    cmd = script.command
    groups = [cmd.prefix] if cmd.prefix else []
    groups += list(cmd.parts)
    texts = [join(g) for g in groups if g]
    texts.append('"$@"')
    lead = "exec " if script.exec_ else ""
    body = (" \\\n    ").join(texts)
    if script.stdout_to:
        body += f' > "$here/{script.stdout_to}"'
    return [lead + body]


def render_script(plan: Plan, model: ModelSpec, launch: Launch, script: Script) -> str:
    """The full text of one script (bash, `set -euo pipefail`)."""
    out = ["#!/usr/bin/env bash"]
    out += header_lines(plan, model, launch, script)
    out.append("set -euo pipefail")
    for name, what in script.requires:
        msg = f"set {name} to {what}"
        out.append(f': "${{{name}:?{_guard_text(msg)}}}"')
    if script.stdout_to or script.after:
        out.append('here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"')
    for k, v in script.command.env:
        out.append(f"export {k}={quote(v)}")
    out += _command_lines(script)
    out += list(script.after)
    return "\n".join(out) + "\n"


def _guard_text(msg: str) -> str:
    """Text inside "${VAR:?...}": no character bash would expand, quote or end the word on
    (a single quote there opens a quote even inside the double quotes)."""
    return "".join(c for c in msg if c.isalnum() or c in " .,:-_/()")
