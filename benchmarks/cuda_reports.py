"""moeplan's per-device VRAM buffers against public CUDA runs (tests/data/cuda_reports/train.json).

For every report whose settings moeplan can take (a bundled profile, the context, the
placement and, for the compute buffer, flash attention; the record's `predict` block names
what the benchmark adds to the report's `flags`), prints each device's model / KV / compute
buffer as moeplan predicts it (planner.memory.accounting.estimate_memory, the function
`tune` and `estimate` use) beside the report's, with the error, and a summary. The constants
are a CUDA build's (MemoryConstants(gpu_build="cuda"), planner/memory/cuda_runtime.py: FA's F16
copies of a quantized cache in the compute buffer, the memory pool's high-water beside the
buffers, with the SM count of the report's GPU where it names one), so a VRAM reading is
compared with every buffer + the CUDA context prior + the pool:

    python benchmarks/cuda_reports.py            # table + summary
    python benchmarks/cuda_reports.py --json     # the rows as JSON
    python benchmarks/cuda_reports.py --log run.log --model model.gguf   # + a recorded run
    python benchmarks/cuda_reports.py --assume-ubatch 4096   # a what-if for reports that do not state -ub

TRAINING data: the reports may be used to fit moeplan's CUDA constants, so agreement with
them is not held-out accuracy. Settings a report does not state are taken at the tool's
default only where that default is the same in every build (-ub 512, -b 2048, f16 cache,
one sequence) and the record says so (`defaults` in the output); a report that does not
state the context, the placement or (for compute) flash attention is not predicted.
Model buffers are compared only where the record names a quantisation moeplan builds
exactly (`predict.quant`); the reports' mixed-type GGUFs are not.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from moeplan.commands.placement_opts import resolve_placement  # noqa: E402
from moeplan.planner.memory.accounting import MemoryBreakdown, MemoryConstants, estimate_memory  # noqa: E402
from moeplan.planner.model.spec import ModelSpec  # noqa: E402
from moeplan.planner.placement import Placement  # noqa: E402
from moeplan.profiles.model_profiles import load_profile  # noqa: E402
from moeplan.units import MIB  # noqa: E402

DATA = ROOT / "tests" / "data" / "cuda_reports" / "train.json"
# defaults that llama.cpp and ik_llama.cpp have had in every build (common/common.h)
DEFAULTS = {"n_ubatch": 512, "n_batch": 2048, "cache_type_k": "f16", "n_seq": 1}
# KV buffers: the log's per-device line and its own total differ by the buffer's alignment
KV_EXACT_MIB = 0.1
# streaming multiprocessors of the GPUs the reports name (NVIDIA's published specifications);
# they size MMQ's stream-k fixup buffer in the pool. Others: the H100 SXM default (132).
SM_COUNTS = {"RTX 5090": 170, "RTX 5080": 84, "RTX 4090": 128, "RTX 3090": 82, "RTX A6000": 84,
             "RTX PRO 6000": 188, "Tesla P40": 30, "H100": 132}


def cuda_constants(report: dict) -> MemoryConstants:
    """A CUDA build's memory constants for the report's GPU."""
    gpus = report.get("gpus", "")
    sm = next((n for name, n in SM_COUNTS.items() if name in gpus), MemoryConstants().gpu_sm_count)
    return MemoryConstants(gpu_build="cuda", gpu_sm_count=sm)


@dataclass(frozen=True)
class Row:
    report: str
    device: str
    kind: str  # model | KV | compute | VRAM (a reading of the whole device)
    predicted_mib: float
    reported_mib: float
    source: str  # which figure of the report: the buffer line, a failed allocation, the log's total

    @property
    def error(self) -> float:
        return (self.predicted_mib - self.reported_mib) / self.reported_mib


def load_reports(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text())["reports"]


def predictable(report: dict) -> bool:
    return "predict" in report


def _setting(report: dict, key: str, defaults: list[str], assume: dict | None = None):
    flags = report.get("flags", {})
    if key in flags:
        return flags[key]
    if assume and key in assume:
        defaults.append(f"{key}={assume[key]} (assumed)")
        return assume[key]
    if key in DEFAULTS:
        defaults.append(key)
        return DEFAULTS[key]
    return None


def placement_of(report: dict, assume: dict | None = None) -> tuple[ModelSpec, Placement, list[str]]:
    """The model and the placement a report ran, from its stated flags and its `predict`
    block; the list names the settings taken at the tools' fixed defaults."""
    pr = report["predict"]
    flags = report.get("flags", {})
    defaults: list[str] = []
    model = load_profile(pr["profile"], pr.get("quant"))
    if "n_ctx" not in flags:
        raise ValueError(f"{report['id']}: the report does not state the context")
    kv_k = _setting(report, "cache_type_k", defaults)
    kv_v = flags.get("cache_type_v", kv_k)
    fa = flags.get("flash_attn")
    if fa is None and not pr.get("kv_only"):
        raise ValueError(f"{report['id']}: flash attention is not stated; only the KV cache can be predicted")
    cpu_moe = pr.get("cpu_moe")
    n_gpus = int(pr.get("n_gpus", 1))
    ngl = flags.get("n_gpu_layers")
    if "gpu_blocks" in pr:
        # builds before the output layer counted in -ngl (log: "offloading N repeating layers"):
        # N blocks on the GPU is a current -ngl of N + 1 for the blocks (the output's place then
        # differs, so such records compare the KV cache only)
        ngl = int(pr["gpu_blocks"]) + 1
    p = resolve_placement(
        model, backend=pr.get("backend", "llama.cpp"), ctx=str(flags["n_ctx"]), kv_type=kv_k, kv_type_v=kv_v,
        no_flash_attn=fa is False, ubatch=int(_setting(report, "n_ubatch", defaults, assume)),
        batch=max(int(_setting(report, "n_batch", defaults)), int(_setting(report, "n_ubatch", [], assume))),
        all_cpu_moe=cpu_moe == "all", cpu_moe_layers=cpu_moe if isinstance(cpu_moe, int) else None,
        ngl=ngl if ngl is not None and ngl <= len(model.layers) else None,
        no_op_offload=flags.get("op_offload") is False)
    p = p.with_(n_seq=int(_setting(report, "n_seq", defaults)), n_gpus=n_gpus)
    if n_gpus > 1:
        p = p.with_(options=p.options.with_(tensor_split=flags.get("tensor_split", "")))
    if int(flags.get("pipeline_parallel_copies", 1)) > 1:  # the log's "pipeline parallelism enabled
        # (n_copies=N)": the build's GGML_SCHED_MAX_COPIES (whether it is on stays moeplan's rule)
        p = p.with_(options=p.options.with_(sched_max_copies=int(flags["pipeline_parallel_copies"])))
    if "amb" in flags:  # ik_llama.cpp -amb (MiB): MLA's K*Q in head chunks (compute_buffer.ik_kq_heads)
        p = p.with_(options=p.options.with_(amb=int(flags["amb"])))
    return model, p, defaults


def _per_device(mem: MemoryBreakdown, n_gpus: int) -> dict[str, dict[str, float]]:
    """CUDA<i> -> model / KV / compute MiB as moeplan predicts them."""
    if mem.devices:
        return {f"CUDA{d.index}": {"model": (d.weights_dense_bytes + d.weights_experts_bytes) / MIB,
                                   "KV": d.kv_bytes / MIB, "compute": d.compute_bytes / MIB}
                for d in mem.devices}
    return {"CUDA0": {"model": (mem.get("weights_dense") + mem.get("weights_experts")) / MIB,
                      "KV": mem.get("kv_cache") / MIB, "compute": mem.get("compute") / MIB}}


def compare(report: dict, assume: dict | None = None) -> tuple[list[Row], list[str]]:
    """Predicted against reported, buffer by buffer, for one predictable report; and the
    settings taken at defaults (`assume`: values for settings the report does not state)."""
    model, p, defaults = placement_of(report, assume)
    mem = estimate_memory(model, p, cuda_constants(report))
    pred = _per_device(mem, p.n_gpus)
    pr = report["predict"]
    rows: list[Row] = []
    rid = report["id"]
    kv_total = (mem.get("kv_cache") + mem.get("kv_cache_cpu")) / MIB
    devices = report.get("devices", [])
    # a run on more devices than the report lets moeplan place (no -ts): its totals only
    per_device = all(d["name"] in pred for d in devices)
    if "kv_total_mib" in report and not (per_device and any("kv_mib" in d for d in devices)):
        rows.append(Row(rid, "all", "KV", kv_total, report["kv_total_mib"], "KV self size"))
    for d in devices if per_device else []:
        got = pred.get(d["name"])
        if got is None:
            continue
        if "kv_mib" in d:
            rows.append(Row(rid, d["name"], "KV", got["KV"], d["kv_mib"], "KV buffer line"))
        if pr.get("kv_only"):
            continue
        if "model_mib" in d and pr.get("quant"):
            rows.append(Row(rid, d["name"], "model", got["model"], d["model_mib"], "model buffer line"))
        if "compute_mib" in d:
            rows.append(Row(rid, d["name"], "compute", got["compute"], d["compute_mib"], "compute buffer line"))
        elif "compute_alloc_failed_mib" in d:
            rows.append(Row(rid, d["name"], "compute", got["compute"], d["compute_alloc_failed_mib"],
                            "failed compute allocation"))
    seen_mib = report.get("vram_used_mib", report["vram_used_gib"] * 1024 if "vram_used_gib" in report else None)
    if seen_mib is not None and not pr.get("kv_only"):
        # what nvidia-smi (or the user) saw: every buffer, moeplan's CUDA context prior and the pool
        rows.append(Row(rid, "all", "VRAM", mem.vram_bytes / MIB, seen_mib,
                        f"VRAM reading (pool {mem.get('cuda_pool') / MIB:.0f} MiB, context "
                        f"{mem.get('cuda_context') / MIB:.0f} MiB)" + (" (approximate)" if report.get("vram_approx") else "")))
    return rows, defaults


def all_rows(reports: list[dict], assume: dict | None = None) -> tuple[list[Row], dict[str, list[str]], dict[str, str]]:
    rows: list[Row] = []
    defaults: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    for r in reports:
        if not predictable(r):
            skipped[r["id"]] = r.get("why_not_predicted") or (
                "the model is not among moeplan's bundled profiles" if "profile" not in r
                else "the report does not state the settings")
            continue
        rr, dd = compare(r, assume)
        rows += rr
        defaults[r["id"]] = dd
    return rows, defaults, skipped


def summary(rows: list[Row]) -> dict:
    comp = [r for r in rows if r.kind == "compute"]
    kv = [r for r in rows if r.kind == "KV"]
    model = [r for r in rows if r.kind == "model"]
    errs = [r.error for r in comp]
    worst = max(comp, key=lambda r: abs(r.error)) if comp else None
    vram = [r for r in rows if r.kind == "VRAM"]
    vworst = max(vram, key=lambda r: abs(r.error)) if vram else None
    return {
        "compute_devices": len(comp),
        "compute_reports": len({r.report for r in comp}),
        "compute_median_abs_error": statistics.median(abs(e) for e in errs) if errs else None,
        "compute_worst": ({"report": worst.report, "device": worst.device, "error": worst.error} if worst else None),
        "compute_below": sum(e < 0 for e in errs),
        "compute_within_5pct_not_below": sum(0 <= e <= 0.05 for e in errs),
        # each report once (its worst device), so that a run on many equal devices does not weigh more
        "compute_per_report": {rid: max((r.error for r in comp if r.report == rid), key=abs)
                               for rid in sorted({r.report for r in comp})},
        "kv_figures": len(kv),
        "kv_exact": sum(abs(r.predicted_mib - r.reported_mib) <= KV_EXACT_MIB for r in kv),
        "vram_figures": [(r.report, r.error) for r in vram],
        "vram_median_abs_error": statistics.median(abs(r.error) for r in vram) if vram else None,
        "vram_worst": {"report": vworst.report, "error": vworst.error} if vworst else None,
        "vram_below": sum(r.error < 0 for r in vram),
        "model_figures": len(model),
        "model_median_abs_error": statistics.median(abs(r.error) for r in model) if model else None,
    }


def log_rows(log: Path, model_ref: str) -> list[Row]:
    """The same comparison for a whole llama.cpp / ik_llama.cpp log (a recorded CUDA run): the
    placement as `moeplan check` recovers it from the log (its echoed command, context lines
    and override lines), the figures from its buffer lines. `model_ref` is a GGUF file (exact
    model buffers) or a bundled profile name."""
    from moeplan.check.parse import parse_log
    from moeplan.check.placement import recover_placement

    if Path(model_ref).is_file():
        from moeplan.probes.gguf_model import read_gguf_model
        model = read_gguf_model(model_ref)
    else:
        model = load_profile(model_ref)
    run = parse_log(log.read_text(errors="replace"), str(log))
    p = recover_placement(run, model).placement
    n_dev = len({b.buffer_type.split("[")[0] for b in run.buffers if not b.host and b.buffer_type.startswith("CUDA")})
    if n_dev > 1 and p.n_gpus != n_dev:
        p = p.with_(n_gpus=n_dev)
    pred = _per_device(estimate_memory(model, p, MemoryConstants(gpu_build="cuda")), p.n_gpus)
    seen: dict[tuple[str, str], float] = {}
    for b in run.buffers:
        if not b.host and b.kind in ("model", "KV", "compute"):
            key = (b.buffer_type.split("[")[0], b.kind)
            seen[key] = seen.get(key, 0.0) + b.bytes / MIB
    return [Row(log.name, dev, kind, pred[dev][kind], mib, "log buffer line")
            for (dev, kind), mib in sorted(seen.items()) if dev in pred]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    ap.add_argument("--log", type=Path, action="append", default=[],
                    help="also compare a llama.cpp log of a CUDA run (repeatable; needs --model)")
    ap.add_argument("--model", help="for --log: the run's GGUF file or a bundled profile name")
    ap.add_argument("--assume-ubatch", type=int, help="what-if: this -ub for the reports that do not state one "
                    "(and -b at least as large); the rows then are not the reports' stated settings")
    a = ap.parse_args(argv)
    if a.log and not a.model:
        ap.error("--log needs --model (the run's GGUF file or a bundled profile)")
    reports = load_reports(a.data)
    assume = {"n_ubatch": a.assume_ubatch} if a.assume_ubatch else None
    rows, defaults, skipped = all_rows(reports, assume)
    for log in a.log:
        rows += log_rows(log, a.model)
    s = summary(rows)
    if a.json:
        print(json.dumps({"rows": [{**asdict(r), "error": r.error} for r in rows], "defaults": defaults,
                          "not_predicted": skipped, "summary": s}, indent=1))
        return 0
    print(f"{len(reports)} public CUDA reports (TRAINING data), {len(reports) - len(skipped)} predictable")
    print(f"{'report':38} {'device':7} {'buffer':8} {'moeplan':>10} {'report':>10} {'error':>8}  source")
    for r in rows:
        print(f"{r.report:38} {r.device:7} {r.kind:8} {r.predicted_mib:10.2f} {r.reported_mib:10.2f} "
              f"{r.error:+8.1%}  {r.source}")
    by_id = {r["id"]: r for r in reports}
    for rid, dd in defaults.items():
        if dd:
            caveat = (" (the report says batch flags were set, values not shown: the default is a guess)"
                      if by_id[rid].get("batch_flags_set") and not a.assume_ubatch else "")
            print(f"  {rid}: {', '.join(dd)} at the tools' default{caveat}")
    print("not predicted:")
    for rid, why in skipped.items():
        print(f"  {rid}: {why}")
    print("summary:")
    if s["compute_devices"]:
        w = s["compute_worst"]
        print(f"  compute buffers: {s['compute_devices']} device figures from {s['compute_reports']} reports, "
              f"median |error| {s['compute_median_abs_error']:.1%}, worst {w['error']:+.1%} "
              f"({w['report']} {w['device']}), {s['compute_below']} below the report, "
              f"{s['compute_within_5pct_not_below']} within 5% and not below")
        per = s["compute_per_report"]
        print(f"  per report (worst device): median |error| {statistics.median(abs(e) for e in per.values()):.1%}; "
              + ", ".join(f"{rid} {e:+.1%}" for rid, e in per.items()))
    print(f"  KV buffers: {s['kv_exact']} of {s['kv_figures']} exact (within {KV_EXACT_MIB} MiB)")
    if s["vram_figures"]:
        w = s["vram_worst"]
        print(f"  VRAM readings (nvidia-smi-style totals): {len(s['vram_figures'])}, median |error| "
              f"{s['vram_median_abs_error']:.1%}, worst {w['error']:+.1%} ({w['report']}), "
              f"{s['vram_below']} below the reading")
    for rid, e in s["vram_figures"]:
        print(f"  VRAM reading: {rid} {e:+.1%}")
    if s["model_figures"]:
        print(f"  model buffers: {s['model_figures']} figures, median |error| {s['model_median_abs_error']:.1%}")
    else:
        print("  model buffers: none comparable (no report of a quantisation moeplan builds exactly)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
