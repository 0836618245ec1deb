"""llama.cpp's own dry run of a plan: `llama-fit-params -fitp on` (I/O; issue 33 item 7).

`llama-fit-params` with `--fit-print on` (`-fitp on`, tools/fit-params/fit-params.cpp L70-75 at
0c1e570) loads the model with `no_alloc = true`, creates the context with the given flags and
prints, per device and then for the host, the MiB its buffers would take
(common/fit.cpp L1088-1113 `common_fit_print`):

    <device name> <model MiB> <context MiB> <compute MiB>
    ...
    Host <model MiB> <context MiB> <compute MiB>

each figure the byte count divided by 2^20 and truncated. It allocates nothing, takes seconds,
and is exact for that build and backend - on CUDA the user's truth for every buffer llama.cpp
sizes itself (not the CUDA context, the pool or other processes: nvidia-smi's extra).
`fit_rows` parses that output; `run_fit_print` runs it; `compare_devices` puts moeplan's
per-device figures beside it.
"""
from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from moeplan.units import MIB

_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+) ?$")
# with -v: llama_prepare_model_devices (src/llama.cpp) names each device and its free memory as
# llama.cpp sees it after its own backend initialisation (CUDA: the context already subtracted)
_FREE = re.compile(r"using device (\S+) \(.*\) - (\d+) MiB free")


@dataclass(frozen=True)
class FitRow:
    """One device (or 'Host') of llama-fit-params' estimate, in MiB (truncated)."""

    device: str
    model_mib: int
    context_mib: int
    compute_mib: int

    @property
    def total_mib(self) -> int:
        return self.model_mib + self.context_mib + self.compute_mib


def fit_rows(stdout: str) -> list[FitRow]:
    """The rows of `llama-fit-params -fitp on`'s stdout; the log lines (stderr, or mixed in
    when both streams are captured together) do not match the four-field pattern."""
    rows = []
    for line in stdout.splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows.append(FitRow(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))))
    if not rows or rows[-1].device != "Host":
        raise ValueError("llama-fit-params printed no per-device estimate (expected a last 'Host M C K' line)")
    return rows


def has_fit_params(backend: str) -> bool:
    """Whether the backend's programs include llama-fit-params: mainline llama.cpp's GGUF
    programs (ggml's own kernels) do; ik_llama.cpp's and the Python runtimes' do not. Asked of
    the backend registry (planner/backends.py), as every backend property is."""
    from moeplan.planner import backends

    b = backends.BACKENDS.get(backend)
    return b is not None and b.gguf_runner and b.cpu_kernels == "mainline"


def fit_params_program(bin_dir: str | Path) -> Path | None:
    for name in ("llama-fit-params", "llama-fit-params.exe"):
        p = Path(bin_dir) / name
        if p.is_file():
            return p
    return None


def free_mib(log: str) -> dict[str, int]:
    """Each device's free MiB from `llama-fit-params -v`'s log (last figure per device)."""
    return {m.group(1): int(m.group(2)) for m in _FREE.finditer(log)}


@dataclass(frozen=True)
class FitRun:
    """One `llama-fit-params -fitp on -v` run: its argv, rows, each device's free MiB as
    llama.cpp reported it, the program's version line and its verbatim stdout."""

    argv: tuple[str, ...]
    rows: tuple[FitRow, ...]
    free_mib: dict[str, int]
    stdout: str
    device_lines: tuple[str, ...] = ()  # the 'using device ...' log lines, verbatim
    seconds: float = 0.0


def run_fit_params(bin_dir: str | Path, model_path: str | Path, flags: Sequence[str],
                   env: dict[str, str] | None = None, timeout_s: float = 600.0) -> FitRun:
    """`llama-fit-params -m MODEL FLAGS -fitp on -v`: the rows and the devices' free memory.
    RuntimeError with the program's last lines when it fails; FileNotFoundError without it."""
    import os
    import time

    prog = fit_params_program(bin_dir)
    if prog is None:
        raise FileNotFoundError(f"no llama-fit-params in {bin_dir} (llama.cpp builds it as tools/fit-params)")
    argv = (str(prog), "-m", str(model_path), *flags, "-fitp", "on", "-v")
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, errors="replace",
                           stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"llama-fit-params ran past {timeout_s:.0f} s") from None
    if r.returncode != 0:
        lines = [ln for ln in (r.stdout + r.stderr).strip().splitlines() if " D " not in ln[:16]]
        tail = " | ".join(ln.strip() for ln in lines[-3:])
        raise RuntimeError(f"llama-fit-params exited {r.returncode}: {tail}")
    return FitRun(argv=argv, rows=tuple(fit_rows(r.stdout)), free_mib=free_mib(r.stderr), stdout=r.stdout,
                  device_lines=tuple(ln for ln in r.stderr.splitlines() if _FREE.search(ln)),
                  seconds=time.monotonic() - t0)


def run_fit_print(bin_dir: str | Path, model_path: str | Path, flags: Sequence[str],
                  timeout_s: float = 300.0) -> list[FitRow]:
    """Run `llama-fit-params -m MODEL FLAGS -fitp on` (the plan's placement flags: -ngl, -ot,
    -ts, -c, -ub, -b, -ctk/-ctv, -fa, -np, ...) and return its rows. RuntimeError with the
    program's last lines when it fails."""
    prog = fit_params_program(bin_dir)
    if prog is None:
        raise FileNotFoundError(f"no llama-fit-params in {bin_dir} (llama.cpp builds it as tools/fit-params)")
    argv = [str(prog), "-m", str(model_path), *flags, "-fitp", "on"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"llama-fit-params exited {r.returncode}: {tail}")
    return fit_rows(r.stdout)


# ---- the records of a check (tuner/fitcheck.py judges; kept here, light, for the CLI's plain path)

NO_BIN_NOTE = ("llama.cpp's dry run not run: give --bin BUILD/bin (a llama.cpp build with llama-fit-params) to "
               "check the plan with llama.cpp's own buffer sizes")


@dataclass(frozen=True)
class DeviceFigures:
    """moeplan's figures of one device (or 'Host', last) as a plan carries them."""

    device: str  # 'GPU0', ..., 'Host'
    model_bytes: int
    context_bytes: int  # the KV cache (llama.cpp's 'context' column)
    compute_bytes: int
    other_bytes: int = 0  # what llama.cpp's buffers do not hold: CUDA context and pool (GPU)
    margin_bytes: int = 0
    budget_bytes: int | None = None  # the device's budget in the plan's hardware profile


@dataclass(frozen=True)
class DeviceCheck:
    device: str  # llama.cpp's name (CUDA0, RPC1, Host)
    moeplan: DeviceFigures | None
    row: FitRow
    free_mib: int | None  # as llama.cpp reported it (None for the host and when not logged)
    need_bytes: int  # llama.cpp's buffers + moeplan's other + margin
    fits: bool | None  # None: not judged (the host)
    why: str = ""

    def to_dict(self) -> dict:
        m = self.moeplan
        d: dict[str, object] = {
            "device": self.device,
            "llama_cpp_model_mib": self.row.model_mib, "llama_cpp_context_mib": self.row.context_mib,
            "llama_cpp_compute_mib": self.row.compute_mib,
            "moeplan_model_mib": _mib(m.model_bytes) if m else None,
            "moeplan_context_mib": _mib(m.context_bytes) if m else None,
            "moeplan_compute_mib": _mib(m.compute_bytes) if m else None,
            "moeplan_other_mib": _mib(m.other_bytes) if m else None,
            "margin_mib": _mib(m.margin_bytes) if m else None,
            "need_mib": _mib(self.need_bytes),
            "budget_mib": _mib(m.budget_bytes) if m and m.budget_bytes is not None else None,
            "llama_cpp_free_mib": self.free_mib,
            "fits": self.fits,
        }
        if self.why:
            d["why"] = self.why
        return d


@dataclass(frozen=True)
class FitCheck:
    """The outcome of a dry run: status 'fits' | 'does-not-fit' | 'not-compared' | 'failed' |
    'skipped', with a one-line note (and hint), the command and each device's comparison."""

    status: str
    note: str
    hint: str = ""
    command: tuple[str, ...] = ()
    devices: tuple[DeviceCheck, ...] = ()
    seconds: float = 0.0
    refused: tuple[str, ...] = ()  # plans refused before this one (tune's next-best search)
    stdout: str = ""

    @property
    def fits(self) -> bool:
        return self.status != "does-not-fit"

    def to_dict(self) -> dict:
        d: dict[str, object] = {"status": self.status, "note": self.note, "command": list(self.command),
                                "per_device": [c.to_dict() for c in self.devices], "seconds": round(self.seconds, 3)}
        if self.hint:
            d["hint"] = self.hint
        if self.refused:
            d["refused"] = list(self.refused)
        return d


def _mib(n: int) -> float:
    return round(n / MIB, 2)


def skipped(note: str) -> FitCheck:
    return FitCheck(status="skipped", note=note)


def compare_devices(rows: Sequence[FitRow], predicted: Sequence[dict]) -> list[dict]:
    """llama.cpp's dry run beside moeplan's per-device figures. `predicted`: one dict per
    device in order, with weights_bytes (model), kv_bytes (context) and compute_bytes; the
    rows' devices are matched by position (the host row last, compared when given as the
    last prediction). Differences in MiB, moeplan minus llama.cpp (llama.cpp truncates)."""
    out = []
    for row, pred in zip(rows, predicted):
        entry: dict[str, object] = {"device": row.device}
        for key, mib in (("weights_bytes", row.model_mib), ("kv_bytes", row.context_mib),
                         ("compute_bytes", row.compute_mib)):
            ours = pred.get(key)
            entry[key.replace("_bytes", "")] = {
                "llama_cpp_mib": mib, "moeplan_mib": None if ours is None else ours // MIB,
                "diff_mib": None if ours is None else ours // MIB - mib}
        out.append(entry)
    return out
