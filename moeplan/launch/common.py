"""What every backend emitter produces, and how it becomes shell text.

Commands are argv tuples (grouped per flag for readable line breaks), never strings; the only
shell text is made here, token by token with shlex.quote, so a model path with spaces or
quotes reaches the program unchanged. A value the user must supply at run time (the head
node's address, a model folder moeplan cannot know) is a ShellVar: it renders as "${NAME}"
and the script stops with a message if NAME is unset.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from moeplan.errors import InputError
from moeplan.launch.flags import FlagSet, bad_values, missing_flags
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.plan import Plan
from moeplan.units import GIB, MIB

_VAR_RE = re.compile(r"^\$\{([A-Z][A-Z0-9_]*)\}([A-Za-z0-9_.:/@+-]*)$")


class ShellVar(str):
    """An argv element that the script expands at run time: ShellVar('MODEL') == '${MODEL}',
    ShellVar('HEAD_ADDR', ':5000') == '${HEAD_ADDR}:5000' (a plain suffix only)."""

    var_name: str

    def __new__(cls, name: str, suffix: str = "") -> ShellVar:
        value = f"${{{name}}}{suffix}"
        if not _VAR_RE.match(value):
            raise ValueError(f"not a safe shell variable reference: {value!r}")
        obj = super().__new__(cls, value)
        obj.var_name = name
        return obj


def quote(tok: str) -> str:
    """One argv element as shell text (ShellVar in double quotes, the rest shlex.quote)."""
    if isinstance(tok, ShellVar):
        return f'"{tok}"'
    return shlex.quote(str(tok))


def join(argv) -> str:
    """shlex.join that keeps ShellVar expandable; shlex.split(join(a)) == list(map(str, a))."""
    return " ".join(quote(t) for t in argv)


@dataclass(frozen=True)
class Command:
    """One program run.

    parts: the argv split per flag, e.g. (('llama-server',), ('-m', path), ('-ngl', '62'));
        argv is their concatenation.
    env: variables exported before the run (GGML_OP_OFFLOAD_MIN_BATCH ...).
    prefix: a wrapper argv such as numactl's, run in front of the program.
    """

    parts: tuple[tuple[str, ...], ...]
    env: tuple[tuple[str, str], ...] = ()
    prefix: tuple[str, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(t for part in self.parts for t in part)

    @property
    def full_argv(self) -> tuple[str, ...]:
        return self.prefix + self.argv

    def shell(self) -> str:
        """One line: VAR=value ... prefix program args."""
        env = " ".join(f"{k}={quote(v)}" for k, v in self.env)
        return (env + " " if env else "") + join(self.full_argv)

    def to_dict(self) -> dict:
        return {"argv": [str(t) for t in self.argv], "prefix": list(self.prefix),
                "env": {k: str(v) for k, v in self.env}, "shell": self.shell()}


@dataclass(frozen=True)
class Script:
    """A bash script around one command.

    exec_: replace the shell with the command (servers); otherwise run it and go on.
    stdout_to: file name, next to the script, that receives the command's stdout.
    after: shell lines run after the command (checks); written by the emitter, not the user.
    requires: (NAME, what to set it to) for every ShellVar the command uses.
    """

    name: str
    purpose: str
    command: Command
    exec_: bool = True
    stdout_to: str = ""
    after: tuple[str, ...] = ()
    requires: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ConfigFile:
    name: str
    text: str
    purpose: str = ""


@dataclass(frozen=True)
class Launch:
    """Everything one backend needs to run a plan."""

    backend: str
    target: str  # the program version the flags were chosen for, in words
    scripts: tuple[Script, ...]
    configs: tuple[ConfigFile, ...] = ()
    notes: tuple[str, ...] = ()
    cpu_layers: tuple[int, ...] = ()
    patterns: tuple[str, ...] = ()
    bench_overrides: str = ""  # what llama-bench's JSON must report in tensor_buft_overrides
    placement_text: str = ""  # where the experts go, when not whole layers (KTransformers, vLLM)
    os: str = "linux"  # 'windows': launch.ps1 / launch.cmd are rendered beside the bash files
    win_bind: tuple[int, str] | None = None  # (node, start /AFFINITY mask) when launch.cmd binds a node

    def script(self, name: str) -> Script:
        for s in self.scripts:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "target": self.target,
            "cpu_layers": list(self.cpu_layers),
            "patterns": list(self.patterns),
            "bench_overrides": self.bench_overrides,
            "placement_text": self.placement_text,
            "scripts": {s.name: {"purpose": s.purpose, **s.command.to_dict()} for s in self.scripts},
            "configs": [c.name for c in self.configs],
            "notes": list(self.notes),
            **({"os": self.os, "windows_bind": list(self.win_bind) if self.win_bind else None}
               if self.os != "linux" else {}),
        }


@dataclass(frozen=True)
class EmitContext:
    """Inputs of an emitter: the plan, the model as read now, the programs' flags.

    flags: tool name ('server', 'bench', 'once', 'python', 'vllm') -> FlagSet.
    programs: tool name -> the program as the script calls it (a name on PATH or a path).
    model_path: the model argument for the scripts: a path or a ShellVar.
    n_nodes: identical machines to spread the model over (vLLM, SGLang).
    os: 'linux' or 'windows' (then launch.ps1 and launch.cmd are written too).
    gpu_vram_bytes: memory of one GPU, when known (needed by vLLM/SGLang/KTransformers fractions).
    """

    plan: Plan
    model: ModelSpec
    flags: dict[str, FlagSet]
    programs: dict[str, str]
    model_path: str = ""
    n_nodes: int = 1
    gpu_vram_bytes: int | None = None
    notes: tuple[str, ...] = field(default=())
    os: str = "linux"  # the OS the scripts are for: 'windows' drops numactl/--numa (launch/numa.py)

    @property
    def placement(self):
        return self.plan.placement


def refuse_experts_override(ctx: EmitContext, backend: str) -> None:
    """vLLM, SGLang and KTransformers: moeplan emits no experts-per-token override for them."""
    n = ctx.placement.n_experts_used
    if n and n != ctx.model.n_experts_used:
        raise InputError(f"the plan runs {n} experts per token instead of {ctx.model.n_experts_used}, "
                         f"which moeplan cannot set for {backend}",
                         "emit for llama.cpp or ik_llama.cpp (--override-kv), or re-plan with the model's own k")


def require_flags(command: Command, fs: FlagSet, backend: str, skip: int = 1) -> None:
    """Raise InputError if the program lacks a flag the command uses (after `skip` tokens)."""
    missing = missing_flags(command.argv, fs, start=skip)
    if missing:
        where = fs.source
        raise InputError(
            f"{fs.program} ({where}) has no {', '.join(missing)}, which this plan needs",
            f"update {backend} (the flags target {fs.version or 'its current release'}), "
            f"give --bin a newer build, or re-plan without the setting that needs {missing[0]}")
    bad = bad_values(command.argv, fs, start=skip)
    if bad:
        flag, value = bad[0]
        raise InputError(
            f"{fs.program} ({fs.source}) takes {flag} {fs.arg(flag)}, not {value!r}, which this plan needs",
            f"update {backend} or re-plan without the setting that needs {flag} {value}")


def mib(n_bytes: int) -> int:
    return int(n_bytes // MIB)


def gib(n_bytes: int | float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"
