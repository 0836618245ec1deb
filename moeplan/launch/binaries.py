"""Find a backend's programs and read their `--help` (launch/'s only reading of the outside).

Without --bin, a program found on PATH is used by name (the scripts stay portable) and its
help decides the flags; a program that is not found leaves the release table of the backend
module in charge, and a note says so. With --bin (a build folder, or the program itself;
for SGLang/KTransformers the python that has sglang; for vLLM the `vllm` executable) the
programs come from there and must exist.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from moeplan.errors import InputError, RunnerError
from moeplan.launch.flags import FlagSet, parse_help
from moeplan.planner import backends

HelpReader = Callable[[list[str]], str]
HELP_TIMEOUT_S = 120

# tool -> program names to look for, first found wins
LLAMA_TOOLS = {"server": ("llama-server",), "once": ("llama-completion", "llama-cli"), "bench": ("llama-bench",)}
IK_TOOLS = {"server": ("llama-server",), "once": ("llama-cli",), "bench": ("llama-bench",)}
# flags only ik_llama.cpp lists: -fmoe before PR #863, -no-fmoe after; -rtr / --run-time-repack
IK_MARKERS = ("-fmoe", "--fused-moe", "-no-fmoe", "--no-fused-moe", "-rtr", "--run-time-repack")


@dataclass(frozen=True)
class Programs:
    """What the scripts call (tool -> name or path) and the flags each program takes."""

    programs: dict[str, str]
    flags: dict[str, FlagSet]
    notes: tuple[str, ...] = ()


def read_help(argv: list[str]) -> str:
    """stdout + stderr of `argv` (a --help or --version call), whatever its exit code:
    ik_llama.cpp's llama-server and llama-cli print their full help and exit 1. A program that
    cannot start, dies of a signal, or exits non-zero having printed nothing raises RunnerError
    (an empty or flagless text is parse_help's error)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=HELP_TIMEOUT_S,
                           stdin=subprocess.DEVNULL, errors="replace")
    except (OSError, subprocess.SubprocessError) as exc:
        raise RunnerError(f"cannot run {' '.join(argv)}: {exc}", "check the program path given to --bin") from None
    text = (r.stdout or "") + (r.stderr or "")
    if r.returncode < 0 or (r.returncode != 0 and not text.strip()):
        raise RunnerError(f"{' '.join(argv)} exited with {r.returncode}: {text.strip()[-200:]}",
                          "check that the program runs on this machine")
    return text


def _version(reader: HelpReader, program: str) -> str:
    try:
        text = reader([program, "--version"])
    except RunnerError:
        return ""
    for line in text.splitlines():
        if "version" in line.lower():
            return line.strip()
    return ""


def _is_ik(fs: FlagSet) -> bool:
    return any(fs.has(f) for f in IK_MARKERS)


def find_llama_programs(backend: str, binary: str | None, release: dict[str, FlagSet],
                        which: Callable[[str], str | None] = shutil.which,
                        reader: HelpReader = read_help, exe_suffix: str = "", need_server: bool = True) -> Programs:
    """Programs of llama.cpp or ik_llama.cpp (both name them llama-server / llama-bench).
    need_server False: a --bin folder without llama-server is fine (a llama-bench-only run).
    exe_suffix: '.exe' for Windows builds (llama-server.exe, in --bin's folder or on PATH)."""
    ik = backends.get(backend).cpu_kernels == "iqk"  # ik_llama.cpp's build (its own kernels)
    tools = {k: tuple(n + exe_suffix for n in v) for k, v in (IK_TOOLS if ik else LLAMA_TOOLS).items()}
    folder: Path | None = None
    server_file: Path | None = None
    if binary:
        p = Path(binary).expanduser()
        if not p.exists():
            raise InputError(f"--bin {binary}: no such file or folder",
                             "give the folder with llama-server and llama-bench (build/bin) or llama-server itself")
        folder = p if p.is_dir() else p.parent
        server_file = None if p.is_dir() else p
    programs: dict[str, str] = {}
    flags: dict[str, FlagSet] = {}
    notes: list[str] = []
    for tool, names in tools.items():
        found: str | None = None
        for name in names:
            if tool == "server" and server_file is not None:
                found = str(server_file.absolute())
            elif folder is not None:
                cand = folder / name
                found = str(cand.absolute()) if cand.is_file() else None
            else:
                found = name if which(name) else None
            if not found:
                continue
            fs = parse_help(reader([found, "--help"]), name, f"--help of {found}", _version(reader, found))
            if tool == "once" and name == "llama-cli" + exe_suffix and not ik and not fs.has("-no-cnv"):
                continue  # a conversation-only llama-cli cannot run one prompt and exit
            if _is_ik(fs) != ik:
                kind = "an ik_llama.cpp" if _is_ik(fs) else "a mainline llama.cpp"
                other = "ik_llama.cpp" if _is_ik(fs) else "llama.cpp"
                if binary:
                    raise InputError(f"{found} is {kind} build, not {backend}", f"use --backend {other}")
                notes.append(f"{found} on PATH is {kind} build; flags for {backend} come from its release table")
                found = None
                break
            if ik:
                from moeplan.launch.ikllama import with_parser_flags

                fs, added = with_parser_flags(fs, bench=tool == "bench")
                if added:
                    notes.append(f"{name}'s --help does not list {' '.join(added)}; ik_llama.cpp's parser "
                                 "(common/common.cpp) takes them in every build, so they are used"
                                 + (" (a CPU-only build ignores -ngl)" if "-ngl" in added else ""))
            programs[tool], flags[tool] = found, fs
            break
        if tool not in programs:
            if binary and tool == "server" and need_server:
                raise InputError(f"no llama-server in {folder}", "give --bin the folder that holds the built programs")
            programs[tool], flags[tool] = names[0], release[tool]
            if binary:
                notes.append(f"no {names[0]} next to {binary}: its flags come from {release[tool].version}")
    return Programs(programs=programs, flags=flags, notes=tuple(notes))


def find_python_programs(backend: str, binary: str | None, release: dict[str, FlagSet],
                         which: Callable[[str], str | None] = shutil.which,
                         reader: HelpReader = read_help, marker: str = "") -> Programs:
    """The python that runs sglang (SGLang, KTransformers). `marker`: a flag the server must
    have (--kt-method for KTransformers)."""
    if binary:
        p = Path(binary).expanduser()
        if not p.is_file():
            raise InputError(f"--bin {binary}: not a file", "give the python executable of the sglang environment")
        python = str(p.absolute())
    else:
        python = "python" if which("python") else ("python3" if which("python3") else "")
    if not python:
        return Programs({"server": "python"}, dict(release), ("no python on PATH: flags from the release table",))
    try:
        server = parse_help(reader([python, "-m", "sglang.launch_server", "--help"]),
                            "python -m sglang.launch_server", f"--help of sglang.launch_server ({python})")
        bench = parse_help(reader([python, "-m", "sglang.bench_serving", "--help"]),
                           "python -m sglang.bench_serving", f"--help of sglang.bench_serving ({python})")
    except (RunnerError, InputError) as exc:
        if binary:
            raise InputError(f"{python} cannot run sglang: {getattr(exc, 'message', exc)}",
                             "give --bin the python of the environment where sglang is installed") from None
        return Programs({"server": python}, dict(release),
                        (f"sglang is not importable by {python}: flags from the release table",))
    if marker and not server.has(marker):
        if binary:
            raise InputError(f"the sglang of {python} has no {marker}", f"install kt-kernel's SGLang ({backend})")
        return Programs({"server": python}, dict(release),
                        (f"the sglang of {python} has no {marker}: flags from the release table",))
    return Programs({"server": python}, {"server": server, "bench": bench})


def find_vllm_programs(binary: str | None, release: dict[str, FlagSet],
                       which: Callable[[str], str | None] = shutil.which,
                       reader: HelpReader = read_help) -> Programs:
    if binary:
        p = Path(binary).expanduser()
        p = p / "vllm" if p.is_dir() else p
        if not p.is_file():
            raise InputError(f"--bin {binary}: no vllm executable there", "give the path of the `vllm` command")
        vllm = str(p.absolute())
    else:
        vllm = "vllm" if which("vllm") else ""
    if not vllm:
        return Programs({"server": "vllm"}, dict(release), ("no vllm on PATH: flags from the release table",))
    try:
        serve = parse_help(reader([vllm, "serve", "--help=all"]), "vllm serve", f"--help of {vllm} serve")
        bench = parse_help(reader([vllm, "bench", "serve", "--help"]), "vllm bench serve",
                           f"--help of {vllm} bench serve")
    except (RunnerError, InputError) as exc:
        if binary:
            raise InputError(f"cannot read the flags of {vllm}: {getattr(exc, 'message', exc)}",
                             "check that `vllm serve --help=all` runs") from None
        return Programs({"server": vllm}, dict(release), (f"{vllm} did not print its flags: release table used",))
    return Programs({"server": vllm}, {"server": serve, "bench": bench})
