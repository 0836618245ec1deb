"""Turn a Plan into the commands and files that run it, one module per backend.

    write_launch_files(plan, model, out_dir, backend=None, binary=None) -> [paths]

writes launch.sh (the server), bench.sh (the measurement that verifies the plan), plan.json,
launch.json (every command as an argv list, for programs) and, per backend, complete.sh
(llama.cpp, ik_llama.cpp: one short completion), vllm.yaml, ray-*.sh, launch-nodeN.sh.

Backend settings a plan may carry in Placement.options (all optional; planner/options.py
PlanOptions, a typed record that refuses any other name), among them:
  op_offload_min_batch  llama.cpp: GGML_OP_OFFLOAD_MIN_BATCH for the run
  tensor_split, devices llama.cpp/ik: -ts and -dev with several GPUs (default: an even split)
  draft_model, spec_type  speculative decoding (default: the model's MTP blocks if it has any)
  kt_method, kt_weight_path, kt_max_deferred_experts_per_token  KTransformers
  hf_bytes_per_param    vLLM/SGLang memory check of a GGUF plan (default 2, BF16)
  gpu_build, gfx_target, unified_memory  the llama.cpp build (ROCm, Vulkan) the scripts are for
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from moeplan.errors import InputError
from moeplan.launch.binaries import (
    HelpReader,
    Programs,
    find_llama_programs,
    find_python_programs,
    find_vllm_programs,
    read_help,
)
from moeplan.launch.common import EmitContext, Launch, ShellVar
from moeplan.launch.render import render_script
from moeplan.planner.backends import BACKENDS
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.plan import Plan

# each backend's emitter module, as its planner record names it (planner/backends.py)
EMITTERS: dict[str, ModuleType] = {b.name: importlib.import_module(f"moeplan.launch.{b.emitter}")
                                   for b in BACKENDS.values()}


def backend_of(plan: Plan, backend: str | None) -> str:
    name = backend or plan.placement.backend
    if name not in EMITTERS:
        raise InputError(f"unknown backend {name!r}", "use one of " + ", ".join(EMITTERS))
    return name


WINDOWS_BACKENDS = tuple(b.name for b in BACKENDS.values() if b.windows_native)


def os_of(plan: Plan, os_family: str | None) -> str:
    """The OS the launch files are for: --os, else the plan's hardware profile's."""
    from moeplan.planner.hardware.profile import OS_FAMILIES

    name = (os_family or plan.hardware_os or "linux").strip().lower()
    if name not in OS_FAMILIES:
        raise InputError(f"unknown --os {os_family!r}", "use one of " + ", ".join(OS_FAMILIES))
    return name


def release_programs(backend: str, os_family: str = "linux") -> Programs:
    """The programs and flags of the backend's targeted release (no binary consulted)."""
    mod = EMITTERS[backend]
    flags = mod.release_flags()
    if BACKENDS[backend].gguf_runner:
        suffix = ".exe" if os_family == "windows" else ""
        return Programs(programs={k: v + suffix for k, v in mod.PROGRAMS.items()}, flags=flags)
    return Programs(programs={"server": BACKENDS[backend].server_program}, flags=flags)


def find_programs(backend: str, binary: str | None, which: Callable[[str], str | None] | None = None,
                  reader: HelpReader | None = None, os_family: str = "linux") -> Programs:
    """The backend's programs on this machine (or at --bin), with the flags their --help lists.
    os_family 'windows': llama.cpp's programs are named llama-server.exe ... (in --bin or on PATH)."""
    import shutil

    which = which or shutil.which
    reader = reader or read_help
    release = EMITTERS[backend].release_flags()
    if BACKENDS[backend].gguf_runner:
        return find_llama_programs(backend, binary, release, which, reader,
                                   exe_suffix=".exe" if os_family == "windows" else "")
    if BACKENDS[backend].server_program != "python":  # a server program of its own (vLLM's `vllm`)
        return find_vllm_programs(binary, release, which, reader)
    return find_python_programs(backend, binary, release, which, reader, marker=BACKENDS[backend].help_marker)


def script_model_path(model: ModelSpec, backend: str) -> str:
    """The model argument of llama.cpp-family scripts: the GGUF (first shard), else $MODEL."""
    if BACKENDS[backend].gguf_runner and model.source == "gguf" and model.path:
        return model.shards[0] if model.shards else model.path
    return ShellVar("MODEL")


def emit_launch(plan: Plan, model: ModelSpec, backend: str | None = None, programs: Programs | None = None,
                *, n_nodes: int = 1, gpu_vram_bytes: int | None = None, model_path: str | None = None,
                os_family: str | None = None) -> Launch:
    """The Launch of `plan` for `backend` (pure: the programs' flags are given). os_family:
    'linux' or 'windows' (default: the plan's hardware profile's OS)."""
    name = backend_of(plan, backend)
    os_name = os_of(plan, os_family)
    if n_nodes < 1:
        raise InputError(f"--nodes {n_nodes} must be at least 1", "give the number of identical machines")
    progs = programs or release_programs(name, os_name)
    notes = list(progs.notes)
    if plan.placement.backend != name:
        notes.append(f"the plan was made for {plan.placement.backend}; its speed figures are for that backend")
    if os_name == "windows" and name not in WINDOWS_BACKENDS:
        notes.append(f"no Windows launch files for {name}: it has no native Windows build; run the bash files "
                     "under Linux or WSL2")
    ctx = EmitContext(plan=plan, model=model, flags=progs.flags, programs=progs.programs,
                      model_path=model_path if model_path is not None else script_model_path(model, name),
                      n_nodes=n_nodes, gpu_vram_bytes=gpu_vram_bytes, notes=tuple(notes),
                      os=os_name if name in WINDOWS_BACKENDS else "linux")
    launch = EMITTERS[name].emit(ctx)
    if ctx.os == "windows":
        from dataclasses import replace

        from moeplan.launch.winscripts import windows_bind

        launch = replace(launch, os="windows", win_bind=windows_bind(plan.placement))
    return launch


def preview_command(plan: Plan, model: ModelSpec, backend: str | None = None) -> str:
    """The plan's server command as one shell line, for people reading `moeplan tune` (flags of
    the targeted release; `emit` and `tune --emit` check them against the installed binary).
    For a Windows plan: the line of launch.cmd (cmd's quoting, `start /NODE` when it binds)."""
    from moeplan.errors import MoeplanError

    try:
        launch = emit_launch(plan, model, backend)
    except MoeplanError as err:
        return f"# no {backend_of(plan, backend)} command: {err.message}"
    if launch.os == "windows":
        from moeplan.launch.winscripts import cmd_line

        return cmd_line(launch.scripts[0].command, launch.win_bind)
    return launch.scripts[0].command.shell()


def render_files(plan: Plan, model: ModelSpec, launch: Launch) -> list[tuple[str, str, bool]]:
    """(file name, text, executable) of everything a launch writes."""
    import json

    from moeplan import __version__

    files = [(s.name, render_script(plan, model, launch, s), True) for s in launch.scripts]
    if launch.os == "windows":
        from moeplan.launch.winscripts import render_cmd, render_ps1

        server = launch.script("launch.sh")
        files += [("launch.ps1", render_ps1(plan, model, launch, server), True),
                  ("launch.cmd", render_cmd(plan, model, launch, server), True)]
    files += [(c.name, c.text, False) for c in launch.configs]
    files.append(("plan.json", plan.to_json(), False))
    doc = {"moeplan_version": __version__, "plan_digest": plan.inputs_digest(), **launch.to_dict()}
    files.append(("launch.json", json.dumps(doc, sort_keys=True, indent=2) + "\n", False))
    return files


def write_launch(plan: Plan, model: ModelSpec, out_dir: Path, backend: str | None = None,
                 binary: str | None = None, *, n_nodes: int = 1, gpu_vram_bytes: int | None = None,
                 programs: Programs | None = None, notes: tuple[str, ...] = (),
                 os_family: str | None = None) -> tuple[Launch, list[Path]]:
    """Emit the plan for `backend` (default: the plan's) into `out_dir`: the Launch and the paths.

    Everything is rendered before the first file is written; the set is written into a
    temporary folder and renamed into place under a lock (moeplan/io.py write_file_set), so an
    error leaves no half-written script and concurrent writers never mix their files.
    """
    name = backend_of(plan, backend)
    os_name = os_of(plan, os_family)
    progs = programs or find_programs(name, binary, os_family=os_name)
    if notes:
        progs = Programs(progs.programs, progs.flags, progs.notes + tuple(notes))
    mp = script_model_path(model, name)
    if not isinstance(mp, ShellVar):
        mp = os.path.abspath(mp)  # scripts run from anywhere
    launch = emit_launch(plan, model, name, progs, n_nodes=n_nodes, gpu_vram_bytes=gpu_vram_bytes, model_path=mp,
                         os_family=os_name)
    files = render_files(plan, model, launch)
    from moeplan.io import write_file_set

    # staged in a temporary folder, then renamed into place under the folder's lock
    return launch, write_file_set(Path(out_dir), files)


def write_launch_files(plan: Plan, model: ModelSpec, out_dir: Path, backend: str | None = None,
                       binary: str | None = None, **kw) -> list[Path]:
    """`tune --emit DIR`: write the launch files of `plan`; returns the paths written.
    Keywords as write_launch (n_nodes, gpu_vram_bytes, programs, notes)."""
    return write_launch(plan, model, out_dir, backend, binary, **kw)[1]
