"""Accuracy of `moeplan estimate` on public measurements.

For each row of benchmarks/data/measurements.jsonl: build a hardware profile with
`moeplan hardware` from the row's published figures (the row's own numbers, the spec-sheet
`lookup_*` fields where the row is silent), run `moeplan estimate` with the row's model,
file size, quant, placement, threads, experts per token, context and backend, and print
predicted against measured decode, prefill and VRAM, the median absolute percentage error
per metric and per backend, and the rows flagged as outliers with the reason.

Nothing here corrects a row: the model is the cost model with its per-backend priors
(moeplan/profiles/backends.toml). Rows without a figure the model can be run on are listed
as skipped, with why.

    python benchmarks/accuracy.py [--data benchmarks/data/measurements.jsonl] [--json]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from moeplan.cli import app

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "measurements.jsonl"
OUTLIER = 0.35
ASSUMED_CPU = "CPU not stated: assumed an 8-core dual-channel DDR5-5600 desktop (speeds not counted)"  # |predicted/measured - 1| beyond this is flagged and explained
GIB = 1024**3

# model names as the rows write them -> bundled profile
MODEL_MAP = [
    (r"deepseek v4 flash", "deepseek-v4-flash"),
    (r"glm 5\.2", "glm-5.2"),
    (r"deepseek[- ]r1|deepseek-v3", "deepseek-v3"),
    (r"qwen3\.5-35b|35b-a3b|~35b", "qwen3.5-35b-a3b"),
    (r"qwen3-30b-a3b", "qwen3-30b-a3b"),
    (r"gpt-oss-120b", "gpt-oss-120b"),
    (r"gpt-oss-20b", "gpt-oss-20b"),
    (r"glm-4\.7-flash", "glm-4.7-flash"),
    (r"kimi-k2", "kimi-k2"),
    (r"deepseek-coder-v2-lite", "deepseek-coder-v2-lite"),
]
# quant labels of the rows -> a recipe moeplan knows (and what the approximation is)
QUANT_MAP = {
    "Q4_K_M": ("Q4_K_M", ""), "MXFP4": ("MXFP4", ""), "IQ2_M": ("IQ2_M", ""), "Q8": (None, ""),
    "Q6_K_L": ("Q6_K", "Q6_K_L approximated by the Q6_K recipe (L keeps embeddings/output at Q8_0)"),
    "IQ5_K (ubergarm)": ("Q5_K_M", "ik_llama.cpp IQ5_K approximated by the Q5_K_M recipe (about 5.5 bpw)"),
}
BACKENDS = {"llama.cpp": "llama.cpp", "llama.cpp (llama-server)": "llama.cpp", "llama.cpp (llama-bench)": "llama.cpp",
            "ik_llama.cpp": "ik_llama.cpp", "KTransformers": "ktransformers"}


@dataclass
class Result:
    row_id: str
    backend: str
    predicted: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    skipped: str = ""
    terms: dict = field(default_factory=dict)

    def errors(self) -> dict:
        return {k: self.predicted[k] / self.measured[k] - 1 for k in self.measured
                if self.measured[k] and self.predicted.get(k)}


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def _pcie(text: str | None) -> str | None:
    m = re.search(r"PCIe\s*(\d)\.0\s*x(\d+)", text or "")
    return f"{m.group(1)}x{m.group(2)}" if m else None


def _prompt_len(r: dict) -> int:
    """Prompt length of the prefill figure: 'pp512' -> 512, '3440-token prompt' -> 3440,
    'over 30K+ tokens' -> 30000; unstated -> 4096."""
    m = re.search(r"(\d+)\s*([kK]?)", r.get("pp_test") or "")
    if not m:
        return 4096
    return int(m.group(1)) * (1000 if m.group(2) else 1)


def hardware_args(r: dict) -> tuple[list[str], list[str]]:
    """`moeplan hardware` arguments from the row's figures; notes on what had to be assumed."""
    args, notes = ["hardware", "--json", "--name", r["id"]], []
    gpu_bw = _num(r.get("lookup_gpu_mem_bw_gbps"))
    vram = _num(r.get("gpu_vram_gb_each")) or _num(r.get("lookup_gpu_vram_gb"))
    cpu_only = (r.get("offload_method") or "").startswith("cpu-only") and not r.get("gpu_model")
    if not cpu_only and gpu_bw and vram:
        args += ["--gpu-vram", f"{vram}G", "--gpu-bw", f"{gpu_bw}GB/s", "--gpu-count", str(r.get("gpu_count") or 1)]
        pcie = _pcie(r.get("lookup_gpu_pcie"))
        if pcie:
            args += ["--pcie", pcie]
        if r.get("gpu_model"):
            args += ["--gpu", r["gpu_model"]]
    elif not cpu_only:
        notes.append("GPU figures not stated")
    cores = _num(r.get("lookup_cpu_cores_per_socket"))
    sockets = int(r.get("cpu_sockets") or 1)
    channels = _num(r.get("lookup_cpu_mem_channels_per_socket"))
    if r.get("ram_channels_total"):
        channels = r["ram_channels_total"] / sockets
    speed = r.get("ram_speed_mts") or r.get("lookup_cpu_max_ram_speed_mts")
    ram_type = r.get("ram_type") or r.get("lookup_cpu_ram_type")
    if r.get("cpu_model"):
        args += ["--cpu", r["cpu_model"]]
    if cores:
        args += ["--cores", str(int(cores))]
    if channels:
        args += ["--channels", str(int(channels))]
    if speed:
        args += ["--ram-speed", str(int(speed))]
    if ram_type:
        args += ["--ram-type", ram_type.lower()]
    args += ["--sockets", str(sockets)]
    ram_is_requirement = "requirement" in (r.get("notes") or "") and "ram_total" in (r.get("notes") or "")
    if r.get("ram_total_gb") and not ram_is_requirement:
        args += ["--ram", f"{int(r['ram_total_gb'])}GB"]
    else:
        # not stated: assume the run fitted in RAM (the row was measured), so no NVMe term
        args += ["--ram", f"{max(64, int((_num(r.get('file_size_gb')) or 0) * 1.5) or 1024)}GB"]
        notes.append("RAM size not stated: assumed large enough")
    if not (cores and channels and speed):
        if not (cores or r.get("cpu_model")):
            # the row does not say: a typical desktop of its time, so VRAM (which does not
            # depend on the CPU) can still be compared; its speeds are reported apart
            args += ["--cores", "8", "--channels", "2", "--ram-type", "ddr5", "--ram-speed", "5600"]
            notes.append(ASSUMED_CPU)
        else:
            notes.append("CPU/DRAM figures not stated")
    return args, notes


def estimate_args(r: dict, hw_path: Path) -> tuple[list[str] | None, list[str], str]:
    notes: list[str] = []
    name = (r.get("model_name") or "").lower()
    profile = next((p for pat, p in MODEL_MAP if re.search(pat, name)), None)
    if profile is None:
        return None, notes, f"no bundled profile for {r.get('model_name')!r}"
    if not r.get("software"):
        notes.append("software not stated: assumed llama.cpp")
    backend = BACKENDS.get(r.get("software") or "llama.cpp")
    if backend is None:
        return None, notes, f"software {r.get('software')!r} unknown"
    args = ["estimate", profile, "--hw", str(hw_path), "--backend", backend, "--json"]
    quant = r.get("quant")
    recipe, qnote = QUANT_MAP.get(quant, (quant, ""))
    size = _num(r.get("file_size_gb"))
    if r["id"].startswith("seed-") and size:
        args += ["--size", f"{size}G"]  # the seed's tools print binary units (see the issue)
    elif size:
        args += ["--size", f"{size}GB"]
    if recipe:
        args += ["--quant", recipe]
    if qnote:
        notes.append(qnote)
    method = r.get("offload_method") or ""
    on_cpu = r.get("moe_layers_on_cpu")
    if method.startswith("cpu-only"):
        args += ["--cpu-only"]  # -ngl 0 (or no GPU): every weight on the CPU
    elif on_cpu == "all" or method in ("cpu-moe", "ktransformers"):
        args += ["--all-cpu-moe"]
    elif isinstance(on_cpu, int):
        args += ["--cpu-moe-layers", str(on_cpu)]
    elif method.startswith("none"):
        pass
    else:
        return None, notes, f"placement not stated ({method})"
    if r.get("threads"):
        args += ["--threads", str(r["threads"])]
    if r.get("ctx_size"):
        args += ["--ctx", str(r["ctx_size"])]
    if r.get("kv_cache_type"):
        args += ["--kv-type", r["kv_cache_type"]]
    if r.get("kv_depth"):
        args += ["--depth", str(r["kv_depth"])]
    if r.get("n_experts_used") and profile in ("deepseek-v3",) and r["n_experts_used"] != 8:
        args += ["--experts-used", str(r["n_experts_used"])]
    if "numa" in (r.get("numa") or "").lower() and backend == "ktransformers":
        pass  # KTransformers' own per-node pools are its model (numa_aware prior)
    if r.get("batch_ubatch"):
        args += ["--ubatch", str(r["batch_ubatch"]).split("/")[-1]]
    args += ["--prompt", str(_prompt_len(r))]
    return args, notes, ""


def _error_line(output: str) -> str:
    try:
        return json.loads(output)["error"]["message"]
    except (ValueError, KeyError):
        return output.strip().splitlines()[0] if output.strip() else "failed"


def run_row(r: dict, runner: CliRunner, tmp: Path) -> Result:
    res = Result(r["id"], BACKENDS.get(r.get("software") or "llama.cpp", r.get("software") or "?"))
    if r.get("speculative"):
        res.skipped = "speculative decoding with an unstated placement"
        return res
    for key, metric in (("tg_tps", "decode_tok_s"), ("pp_tps", "prefill_tok_s")):
        if _num(r.get(key)):
            res.measured[metric] = float(r[key])
    vram = _num(r.get("vram_used_gb"))
    if vram and "requirement" not in (r.get("notes") or "").lower() and "at least" not in (r.get("notes") or ""):
        # the seed rows print GiB (see the issue); the others say GB, which llama.cpp users mean as GiB too
        res.measured["vram_bytes"] = vram * GIB
    if not res.measured:
        res.skipped = "no measured figure"
        return res
    hargs, hnotes = hardware_args(r)
    res.notes += hnotes
    out = runner.invoke(app, hargs)
    if out.exit_code:
        res.skipped = "hardware: " + _error_line(out.output)
        return res
    hw_path = tmp / f"{r['id']}.json"
    hw_path.write_text(json.dumps(json.loads(out.stdout)))
    eargs, enotes, why = estimate_args(r, hw_path)
    res.notes += enotes
    if eargs is None:
        res.skipped = why
        return res
    out = runner.invoke(app, eargs)
    if out.exit_code:
        res.skipped = "estimate: " + _error_line(out.output)
        return res
    d = json.loads(out.stdout)
    res.predicted = {"decode_tok_s": d["decode_tok_s"], "prefill_tok_s": d["prefill_tok_s"],
                     "vram_bytes": d["vram_bytes"] or None}
    res.terms = {"decode": [(t["name"], t["seconds"], t["formula"]) for t in d["decode_terms"]],
                 "prefill": [(t["name"], t["seconds"], t["formula"]) for t in d["prefill_terms"]]}
    res.notes.append(f"bottleneck {d['bottleneck']}")
    return res


CALIBRATION_README = (DEFAULT_DATA.parent / "README.md").read_text() if DEFAULT_DATA.parent.exists() else ""


def explain(r: dict, metric: str, err: float) -> str:
    """Why a row disagrees, from what the row itself says (its confidence, notes, version)."""
    reasons = []
    text = " ".join(str(r.get(k) or "") for k in ("notes", "confidence", "software_version", "flags"))
    if "approx" in text or "paraphrase" in text:
        reasons.append(f"figure is approximate ({r.get('confidence')})")
    if r["id"] in CALIBRATION_README:
        reasons.append("the data set's README singles this row out as disagreeing with its sibling")
    if metric == "vram_bytes" and not r.get("ctx_size"):
        reasons.append("context size and the file's dense-tensor types not stated (moeplan assumed ctx 4096 "
                       "and the plain llama-quantize recipe)")
    if "lacked" in text or "Before llama.cpp PR" in text or "2025" in (r.get("date") or ""):
        reasons.append("older runtime than the priors describe")
    if "requirement" in text or "machine has" in text:
        reasons.append("the row's RAM/VRAM figure is a stated requirement, not the machine")
    if "sweep" in text or "max PP" in (r.get("pp_test") or "") or "30K" in (r.get("pp_test") or ""):
        reasons.append("a maximum over a sweep of context depths, depth not stated")
    if "not stated" in text or r.get("threads") is None:
        reasons.append("threads / memory configuration not stated")
    return "; ".join(reasons) or "unexplained"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--row", help="only rows whose id contains this")
    ap.add_argument("--terms", action="store_true", help="also print each prediction's terms")
    a = ap.parse_args(argv)
    import tempfile

    if not a.data.exists():
        print(f"error: {a.data} not found\nhint: pass --data PATH/measurements.jsonl", file=sys.stderr)
        return 2
    rows = [json.loads(x) for x in a.data.read_text().splitlines() if x.strip()]
    if a.row:
        rows = [r for r in rows if a.row in r["id"]]
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_row(r, runner, Path(tmp)) for r in rows]
    by_id = {r["id"]: r for r in rows}
    per_metric: dict[str, list[float]] = {}
    per_backend: dict[tuple[str, str], list[float]] = {}
    flagged = []
    for res in results:
        for m, e in res.errors().items():
            assumed = ASSUMED_CPU in res.notes and m != "vram_bytes"
            if not assumed:
                per_metric.setdefault(m, []).append(abs(e))
                per_backend.setdefault((res.backend, m), []).append(abs(e))
            if abs(e) > OUTLIER:
                why = explain(by_id[res.row_id], m, e)
                flagged.append((res.row_id, m, e, ("CPU assumed (not counted); " if assumed else "") + why))
    if a.json:
        print(json.dumps({"rows": [vars(r) for r in results],
                          "median_abs_error": {m: statistics.median(v) for m, v in per_metric.items()},
                          "flagged": flagged}, indent=2, default=str))
        return 0
    fmt = {"decode_tok_s": lambda v: f"{v:7.1f}", "prefill_tok_s": lambda v: f"{v:7.0f}",
           "vram_bytes": lambda v: f"{v / GIB:6.1f}G"}
    print(f"{'row':48} {'metric':14} {'predicted':>10} {'measured':>10} {'error':>7}")
    for res in results:
        if res.skipped:
            print(f"{res.row_id:48} skipped: {res.skipped}")
            continue
        for m, meas in res.measured.items():
            pred = res.predicted.get(m)
            if pred is None:
                print(f"{res.row_id:48} {m:14} {'-':>10} {fmt[m](meas):>10}  (no prediction: CPU-only run)")
                continue
            print(f"{res.row_id:48} {m:14} {fmt[m](pred):>10} {fmt[m](meas):>10} {pred / meas - 1:+7.0%}")
        if res.notes:
            print(f"{'':48} note: {'; '.join(res.notes)}")
        if a.terms:
            for phase, terms in res.terms.items():
                for name, sec, formula in terms:
                    print(f"{'':48} {phase:8} {name:20} {sec * 1e3:9.3f} ms  {formula}")
    print("\nmedian absolute percentage error")
    for m, v in sorted(per_metric.items()):
        print(f"  {m:14} {statistics.median(v):6.1%}  over {len(v)} rows")
    for (b, m), v in sorted(per_backend.items()):
        print(f"  {b:14} {m:14} {statistics.median(v):6.1%}  over {len(v)}")
    print(f"\nflagged (|error| > {OUTLIER:.0%}):")
    for row_id, m, e, why in flagged:
        print(f"  {row_id} {m} {e:+.0%}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
