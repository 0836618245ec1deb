"""Accuracy of `moeplan estimate` on the public measurement set, scored honestly.

Every row of benchmarks/data/measurements.jsonl is run the way a new user would run it: the
machine is described with `moeplan hardware --cpu NAME --gpu NAME` (the parts catalog) plus the
memory speed, channels, sockets and RAM the source states -- never the spec-sheet `lookup_*`
fields -- and `moeplan estimate` gets the source's model, quant, file size, placement, threads,
context and depth. A row whose CPU/GPU is not in the catalog, whose quant or placement is
unknown, or whose model is not bundled is counted as *not estimable*, with the reason.

The rows are split by source into train and test (benchmarks/split.py, a rule fixed in the
repository; benchmarks/data/split.json lists it). Nothing is fitted, chosen or ranged on a test
row: the cost model's terms (moeplan/planner/cost/, groups in
ranges.py) are grouped by the resource they
charge (CPU, GPU, PCIe, fixed per-layer/per-token costs); one time scale per group (the CPU group
per backend), shrunk towards 1, is fitted on train rows, and the prediction's range is centred
and sized by the conformal 80th percentile of the train rows' log residuals, held out by source,
of the row's range tier (cost/ranges.py range_tier: 'cpu-bound' where the CPU's terms carry 80%
of the time, else 'shared'), every source weighing the same, each row scored about the
centre the other sources' rows set (docs/cost-model.md). The rows of a source a prior names as
its anchor (benchmarks/anchors.py) set no range: their residuals are the priors' training error.
Figures in three columns -- train (all rows), train non-anchor (the ranges' calibration rows) and
test:

  model (no fit)  the mechanisms and priors alone; its range from the train residuals (a train row:
                  the other train sources' only);
  refit           train rows: leave-one-source-out within train (each row predicted from scales
                  fitted without its source); test rows: the scales fitted on all train rows;
  refit in-sample train rows scored by the scales fitted on them (what over-fitting looks like);

two baselines (a roofline on the active bytes and on all bytes), and the ranking: for every
machine and model of one source with several configurations (placements, threads, ubatches,
depths, backends; the thread sweeps of data/thread-sweeps.json whose model is bundled), how often
the predicted order of two configurations is the measured one (pairs differing by more than 10%)
and the median error of their ratio.

    python benchmarks/accuracy.py [--data PATH] [--rows] [--json] [--write-fit] [--write-docs] [--check]

`--write-fit` stores the train fit and range widths in moeplan/profiles/fit.json, which `moeplan
estimate` applies; `--write-docs` rewrites the generated blocks of docs/cost-model.md and
docs/benchmarks.md; `--check` exits 1 when either differs from what the data gives (CI runs it:
tests/test_accuracy_split.py).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.planner.cost.attention import FA_SPLIT_KV_FROM_BUILD
from moeplan.planner.cost.ranges import (
    CPU_BOUND_SHARE,
    RANGE_TIERS,
    TERM_GROUP,
    source_weights,
    tier_of_groups,
    weighted_conformal_quantile,
    weighted_median,
)
from moeplan.profiles import backends as backends_mod
from moeplan.profiles.catalog import find_cpu

HERE = Path(__file__).resolve().parent


def _load(name: str, file: str):
    """A module of benchmarks/ (loaded by path: benchmarks/ is no package), once."""
    import importlib.util
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


split = _load("moeplan_bench_split", "split.py")  # the train/test rule
anchors = _load("moeplan_bench_anchors", "anchors.py")  # the rows the priors are anchored on
DEFAULT_DATA = HERE / "data" / "measurements.jsonl"
FIT_PATH = HERE.parent / "moeplan" / "profiles" / "fit.json"
GIB = 1024**3
METRICS = ("decode", "prefill", "vram")
# issue 29's targets, judged on the test split
TARGETS = {"decode": 0.20, "prefill": 0.35}
COVERAGE_TARGET, HALF_WIDTH_TARGET = 0.80, 0.35
# shrinkage of each fitted log-factor towards 0 (the prior), in rows' worth of evidence: a
# group seen on two rows moves about two-thirds of the way to what those rows say
SHRINK_ROWS = 1.0
RANGE_QUANTILE = 0.80
# fitted scales must beat the unfitted model's held-out median error by this much to ship
SHIP_MARGIN = 0.01

# model names as the rows write them -> bundled profile
MODEL_MAP = [
    (r"deepseek[- ]v4[- ]flash", "deepseek-v4-flash"),
    (r"glm[- ]5\.2", "glm-5.2"),
    (r"glm[- ]5\.1|glm[- ]5$", "glm-5.1"),
    (r"qwen3-next-80b|qwen3-coder-next", "qwen3-next-80b-a3b"),
    (r"glm-4\.7-flash", "glm-4.7-flash"),
    (r"deepseek[- ]?r1|deepseek-v3(?!\.2)", "deepseek-v3"),
    (r"qwen3\.[56]-35b", "qwen3.5-35b-a3b"),
    (r"qwen3-30b-a3b", "qwen3-30b-a3b"),
    (r"qwen3-coder-30b-a3b", "qwen3-30b-a3b"),  # the profile's alias: the same config
    (r"qwen3-235b-a22b", "qwen3-235b-a22b"),
    (r"qwen3\.5-122b-a10b", "qwen3.5-122b-a10b"),
    (r"qwen3\.5-397b-a17b", "qwen3.5-397b-a17b"),
    (r"qwen3-coder-480b", "qwen3-coder-480b-a35b"),
    (r"deepseek-v3\.2", "deepseek-v3.2"),
    (r"gpt-oss-120b", "gpt-oss-120b"),
    (r"gpt-oss-20b", "gpt-oss-20b"),
    (r"kimi[- ._]?k3", "kimi-k3"),
    (r"kimi-k2-thinking", "kimi-k2-thinking"),
    (r"kimi[- ]?k2\.[56]", "kimi-k2.5"),
    (r"kimi-k2-instruct", "kimi-k2"),
    (r"glm[- ]4\.[567](?!-flash|-air)", "glm-4.5"),
    (r"glm[- ]4\.[56][- ]air", "glm-4.5-air"),
    (r"deepseek-coder-v2-lite", "deepseek-coder-v2-lite"),
    (r"deepseek-v2-lite", "deepseek-coder-v2-lite"),  # the profile is V2-Lite's config (its alias)
    (r"gemma[- ]?4[- ]26b[- ]a4b", "gemma-4-26b-a4b"),
    (r"step[- ]?3\.?5[- ]?flash", "step-3.5-flash"),
    (r"dots[- ._]?llm1", "dots.llm1"),
    (r"ernie[- ._]?4\.?5[- ._]?21b", "ernie-4.5-21b-a3b"),
    (r"ernie[- ._]?4\.?5[- ._]?300b", "ernie-4.5-300b-a47b"),
    (r"nemotron[- ._]?(3|nano[- ._]?3)[- ._]?nano[- ._]?30b|nemotron[- ._]?nano[- ._]?3[- ._]?30b", "nemotron-3-nano-30b-a3b"),
    (r"nemotron[- ._]?3[- ._]?super[- ._]?120b", "nemotron-3-super-120b-a12b"),
    (r"hunyuan[- ._]?(80b[- ._]?)?a13b", "hunyuan-a13b"),
    (r"minimax[- ._]?m2", "minimax-m2"),
    (r"llama[- ._]?4[- ._]?maverick", "llama-4-maverick"),
    (r"llama[- ._]?4[- ._]?scout", "llama-4-scout"),
]
# the software as written -> backend; forks and wrappers are not the backend the priors describe
BACKENDS = [(r"^ik_llama\.cpp", "ik_llama.cpp"), (r"^ktransformers", "ktransformers"),
            (r"^llama\.cpp(?! fork)", "llama.cpp")]
# term resource -> fitted group: the cost model's own table (cost/ranges.py)
GROUP = TERM_GROUP


# ---- running one row -------------------------------------------------------------------------

@dataclass
class Row:
    row: dict
    backend: str = ""
    measured: dict = field(default_factory=dict)  # metric -> value (tok/s, bytes)
    skip: dict = field(default_factory=dict)  # metric -> reason it is not estimable
    groups: dict = field(default_factory=dict)  # metric -> {group: seconds per token}
    prior: dict = field(default_factory=dict)  # metric -> model prediction without fitted factors
    prior_range: dict = field(default_factory=dict)
    # metric -> the estimate's floor below its range (decode_tok_s_paging: mmap with a file
    # larger than the page cache can hold beside the rest), 0 when there is none
    floor: dict = field(default_factory=dict)
    baseline: dict = field(default_factory=dict)  # 'active'/'all' -> decode tok/s
    notes: list = field(default_factory=list)
    # its source is named as a prior's anchor (benchmarks/anchors.py): its residual is training
    # error, so it sets no range and is scored apart
    anchor: bool = False

    @property
    def source(self) -> str:
        return split.source_key(self.row.get("source_url") or self.row["id"])

    @property
    def side(self) -> str:
        """'train' or 'test' (benchmarks/split.py): nothing is fitted or set on a test row."""
        return split.side(self.row.get("source_url") or self.row["id"])

    @property
    def machine(self) -> str:
        return self.row.get("machine_class") or "unknown"


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _backend(software: str | None) -> str | None:
    s = (software or "").strip().lower()
    for pat, b in BACKENDS:
        if re.search(pat, s):
            return b
    return None


def _prompt_len(r: dict) -> int | None:
    """The prompt the prefill figure was measured on; None when the source does not say."""
    m = re.search(r"(\d+)\s*([kK]?)", r.get("pp_test") or "")
    return int(m.group(1)) * (1000 if m.group(2) else 1) if m else None


def _quant(r: dict) -> tuple[str | None, str]:
    """The quant name as a user would pass it, or (None, reason)."""
    q = (r.get("quant") or "").strip()
    if not q:
        return None, "quant not stated"
    tok = q.split()[0]
    if tok.lower() == "native" and "not stated" not in q:  # the published checkpoint's own format
        return "native", ""
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", tok) or "not stated" in q or "as written" in q or tok.lower() in (
            "4bit", "q2", "q4", "q8", "native", "ud"):
        return None, f"quant {q!r} is not a file type"
    return tok.upper(), ""


def _kt_kernel_era(r: dict) -> bool:
    """A KTransformers row of the kt-kernel + SGLang releases (0.4 on), which have the layer-wise
    GPU prefill; the software or version says so."""
    ver = re.match(r"(\d+)\.(\d+)", str(r.get("software_version") or ""))
    return "kt-kernel" in (r.get("software") or "").lower() or bool(ver and (int(ver[1]), int(ver[2])) >= (0, 4))


def _ngl0_with_gpu(r: dict) -> bool:
    """-ngl 0 on a machine with a GPU: llama.cpp still offloads large-batch ops to it."""
    return bool(r.get("gpu_model")) and bool(re.search(r"ngl\s*0\b", r.get("offload_method") or ""))


# installed RAM as machines come (GB)
RAM_SIZES_GB = (64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


def _as_typed(part: str) -> str:
    """A part name as its owner would type it: the data set's ', as written' marks (the source's
    own spelling, kept in the row) dropped."""
    return re.sub(r"\s*\(\s*as written\s*\)|[,;]?\s*as written", "", part).strip()


def _mixed_gpus(model: str) -> list[tuple[str, int]]:
    """'2x RTX 3090 + RTX A4500', '2x RTX 5090, 2x RTX 4090, 1x RTX A6000' -> [(name, count)]; []
    for one kind of card."""
    parts, depth, cur = [], 0, ""
    for ch in model:  # split at '+' and ',' outside parentheses
        depth += (ch == "(") - (ch == ")")
        if ch in "+," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts = [x for x in parts + [cur.strip()] if x]
    if len(parts) < 2:
        return []
    out = []
    for x in parts:
        m = re.match(r"(\d+)\s*x\s*(.+)", x)
        out.append((m.group(2).strip(), int(m.group(1))) if m else (x, 1))
    return out


def hardware_args(r: dict) -> tuple[list[str] | None, str]:
    """`moeplan hardware` arguments as a user would type them, or (None, reason)."""
    args = ["hardware", "--json", "--name", r["id"]]
    method = r.get("offload_method") or ""
    vram = _num(r.get("gpu_vram_gb_each"))
    gpu_used = bool(r.get("gpu_model") or vram) and (not method.startswith("cpu-only") or _ngl0_with_gpu(r))
    mixed = _mixed_gpus(r.get("gpu_model") or "")
    if gpu_used and mixed:  # cards of several kinds: --gpu once per kind, NAME:COUNT
        for name, n in mixed:
            args += ["--gpu", f"{_as_typed(name)}:{n}" if n > 1 else _as_typed(name)]
    elif gpu_used and r.get("gpu_model"):
        args += ["--gpu", _as_typed(r["gpu_model"]), "--gpu-count", str(int(r.get("gpu_count") or 1))]
    elif gpu_used:  # a GPU known by its VRAM alone: the class prior for its bandwidth
        args += ["--gpu-vram", f"{int(vram)}GB", "--gpu-count", str(int(r.get("gpu_count") or 1))]
    sockets = int(r.get("cpu_sockets") or 1)
    cores = _num(r.get("cpu_cores_total"))
    if r.get("cpu_model"):
        args += ["--cpu", _as_typed(r["cpu_model"]), "--sockets", str(sockets)]
    elif cores:  # an unnamed CPU of a stated size: described by its numbers
        args += ["--cores", str(int(cores) // sockets), "--sockets", str(sockets)]
    elif not gpu_used:
        return None, "CPU not stated"
    if cores and r.get("cpu_model"):
        try:  # a VM or a part with cores disabled: the cores the source states
            if find_cpu(_as_typed(r["cpu_model"])).cores * sockets != int(cores):
                args += ["--cores", str(int(cores) // sockets)]
        except InputError:
            pass
    if _num(r.get("dram_bw_measured_gbps")):
        args += ["--dram-bw", f"{r['dram_bw_measured_gbps']}GB/s"]
    if r.get("ram_speed_mts"):
        args += ["--ram-speed", str(int(r["ram_speed_mts"]))]
    if r.get("ram_channels_total"):
        args += ["--channels", str(max(1, int(r["ram_channels_total"]) // sockets))]
    if r.get("ram_type"):
        args += ["--ram-type", str(r["ram_type"]).lower().split()[0]]
    ram = _num(r.get("ram_total_gb"))
    if not ram or re.search(r"ram[^.]*requirement", (r.get("notes") or "").lower()):
        ram = 4096.0  # not stated: the row ran, so its weights fitted in RAM
        if not r.get("cpu_model"):
            # nor the CPU: the RAM picks the stand-in's platform (desktop up to 256 GiB), so take
            # the smallest common size that holds the weights, as the box must have had
            size = _num(r.get("file_size_gb")) or 0.6 * (_num(r.get("total_params_b")) or 0)
            ram = next((float(g) for g in RAM_SIZES_GB if g >= 1.1 * size), ram)
    args += ["--ram", f"{int(ram)}GB"]
    if "windows" in (r.get("os") or "").lower():
        args += ["--os", "windows"]
    # the NUMA nodes the BIOS makes of the sockets: NPS0 one over all, NPSn / SNCn n per socket
    numa = str(r.get("numa") or "")
    nps = re.search(r"\b(?:NPS|SNC)\s*=?\s*(\d)\b", numa, re.I)
    if nps and r.get("cpu_model"):
        args += ["--numa-nodes", str(1 if nps.group(1) == "0" else sockets * int(nps.group(1)))]
    elif re.search(r"\bSNC\s+(?:disabled|off)\b", numa, re.I) and r.get("cpu_model"):
        args += ["--numa-nodes", str(sockets)]  # sub-NUMA clustering off: one node per socket
    return args, ""


def estimate_args(r: dict, backend: str, hw_path: Path) -> tuple[list[str] | None, str]:
    name = (r.get("model_name") or "").lower()
    profile = next((p for pat, p in MODEL_MAP if re.search(pat, name)), None)
    if profile is None:
        return None, f"model {r.get('model_name')!r} not bundled"
    args = ["estimate", profile, "--hw", str(hw_path), "--backend", backend, "--json"]
    quant, why = _quant(r)
    if not quant and profile.startswith("gpt-oss") and "not stated" in why:
        # gpt-oss is published with MXFP4 experts only (its GGUFs keep them): nothing to guess
        quant, why = "MXFP4", ""
    size = _num(r.get("file_size_gb"))
    if quant:
        args += ["--quant", quant]
    elif not size:
        return None, why
    if size:
        # the seed's tools print binary units (benchmarks/data/README.md, seed rows)
        args += ["--size", f"{size}G" if r["id"].startswith("seed-") else f"{size}GB"]
    method = r.get("offload_method") or ""
    on_cpu = r.get("moe_layers_on_cpu")
    if re.search(r"(--split-mode|-sm)\s+row", str(r.get("flags") or "")):
        return None, "placement not expressible (--split-mode row: moeplan models the layer split)"
    if method.startswith("cpu-only") and _ngl0_with_gpu(r):
        args += ["--ngl", "0"]  # every layer on the CPU, the GPU there for op-offload prefill
    elif method.startswith("cpu-only"):
        args += ["--cpu-only"]
    elif backend == "ktransformers" and on_cpu is None and (g := re.search(
            r"--kt-num-gpu-experts[ =](\d+)", str(r.get("flags") or ""))):
        args += ["--kt-gpu-experts", g.group(1)]  # G experts of every layer on the GPU
    elif on_cpu == "all" or method in ("cpu-moe", "ktransformers"):
        args += ["--all-cpu-moe"]
    elif method.startswith("ngl"):
        # a plain layer split: the GPU layer count from the method text or the flags
        m = (re.search(r"(\d+)(?: of \d+)? layers on GPU", method)
             or re.search(r"(?:-ngl|--n-gpu-layers)\s+(\d+)\b", str(r.get("flags") or "")))
        if not m:
            return None, f"placement not expressible ({method})"
        args += ["--ngl", m.group(1)]
    elif isinstance(on_cpu, int):
        args += ["--cpu-moe-layers", str(on_cpu)]
    elif method.startswith("none"):
        pass
    else:
        return None, f"placement not expressible ({method or 'not stated'})"
    kt_cli = backend == "ktransformers" and re.search(r"\bkt run\b", str(r.get("flags") or ""))
    py = "llama-cpp-python" in str(r.get("software") or "")
    if r.get("threads"):
        args += ["--threads", str(int(r["threads"]))]
    elif kt_cli or py:
        # the tool's own default: `kt run` without --cpu-threads 0.8 x the logical CPUs
        # (kt-kernel/python/cli/commands/run.py); llama-cpp-python's Llama() half of them
        # (llama_cpp/llama.py: n_threads or max(multiprocessing.cpu_count() // 2, 1))
        hw = json.loads(hw_path.read_text()) if hw_path.exists() else {}
        logical = (hw.get("cpu") or {}).get("n_threads")
        if logical:
            args += ["--threads", str(int(logical * 0.8) if kt_cli else max(1, logical // 2))]
    if r.get("ctx_size"):
        args += ["--ctx", str(int(r["ctx_size"]))]
    kv = str(r.get("kv_cache_type") or "").strip()
    split = re.fullmatch(r"K\s+(\S+)\s*/\s*V\s+(\S+)", kv)
    if split:  # -ctk and -ctv differ
        args += ["--kv-type", split.group(1).lower(), "--kv-type-v", split.group(2).lower()]
    elif kv:
        args += ["--kv-type", re.split(r"[/\s(]", kv)[0].lower()]
    if r.get("flash_attn") is False and backend in ("llama.cpp", "ik_llama.cpp"):
        args += ["--no-flash-attn"]
    if r.get("kv_depth"):
        args += ["--depth", str(int(r["kv_depth"]))]
    d = re.search(r"@\s*d\s*(\d+)|@\s*N_KV\s+(\d+)", r.get("pp_test") or "")
    if d and int(d.group(1) or d.group(2)):
        # llama-bench -d N, llama-sweep-bench's "PP @ N_KV N": the prompt follows N cached tokens
        args += ["--prompt-depth", d.group(1) or d.group(2)]
    k = r.get("n_experts_used")
    if isinstance(k, int):
        # the model card's count, or a run with fewer (KTransformers' selective experts,
        # ik_llama.cpp -ser 6,1): estimate checks it against the model
        args += ["--experts-used", str(k)]
    numa = (r.get("numa") or "").lower()
    if "interleave" in numa:
        args += ["--numa", "interleave"]
    elif "distribute" in numa:
        args += ["--numa", "distribute"]
    elif re.search(r"-n\s*0|--cpunodebind|membind|-m\s*0|isolate", numa):
        args += ["--numa", "bind"]
    elif "--numa numactl" in numa:
        # any --numa makes ggml_is_numa() true on several nodes: no MAP_POPULATE, MADV_RANDOM
        # (llama-mmap.cpp `if (numa)`), static chunks: first touch by the reading thread, as distribute
        args += ["--numa", "distribute"]
    elif backend == "ktransformers":
        # KTransformers runs one worker pool per node only when the row says so (a USE_NUMA=1
        # build of 0.2/0.3, --kt-threadpool-count N > 1): --numa distribute; else one pool
        said = f"{r.get('flags') or ''} {numa}".lower()
        pools = re.search(r"threadpool(?:[- ]count)?\s*(\d+)", said)
        if re.search(r"use_numa=1", said) or (pools and int(pools.group(1)) > 1) \
                or (kt_cli and not pools and int(r.get("cpu_sockets") or 1) > 1):
            # `kt run` sets --kt-threadpool-count to the NUMA nodes it finds (run.py)
            args += ["--numa", "distribute"]
    thr = re.search(r"--kt-gpu-prefill-token-threshold[ =](\d+)", str(r.get("flags") or ""))
    if backend == "ktransformers" and not _kt_kernel_era(r):
        # KTransformers before kt-kernel (0.2/0.3 local_chat, balance_serve) prefills every prompt's
        # CPU experts on the CPU: no layer-wise GPU prefill
        args += ["--kt-prefill-threshold", "0"]
    elif thr:
        args += ["--kt-prefill-threshold", thr.group(1)]
    elif kt_cli:
        # `kt run MODEL` without its parameters asks for them in a terminal, proposing a threshold
        # of 500 and a 32768-token prefill chunk (kt-kernel/python/cli/utils/run_interactive.py:617-618)
        args += ["--kt-prefill-threshold", "500"]
    chunk = re.search(r"--chunked-prefill-size[ =](\d+)", str(r.get("flags") or ""))
    if backend == "ktransformers" and (chunk or kt_cli):
        args += ["--batch", chunk.group(1) if chunk else "32768"]
    ub = str(r.get("batch_ubatch") or "").split("/")[-1].strip()
    if ub.isdigit():
        args += ["--ubatch", ub]
    if backend == "ik_llama.cpp" and re.search(r"(?:^|\s)(?:-rtr|--run-time-repack)(?!\s+0\b)(?:\s+1)?(?=\s|;|,|$)",
                                                str(r.get("flags") or "")):
        args += ["--rtr"]  # the CPU weights run as their row-interleaved types
    build = _llama_build(r) if backend == "llama.cpp" else None
    if build:
        args += ["--llama-build", str(build)]
    args += ["--prompt", str(_prompt_len(r) or 512)]
    return args, ""


# the last llama.cpp build before a change the cost model follows by build, and the month it
# was merged (cost/attention.py FA_SPLIT_KV_FROM_BUILD: PR #19209, 2026-01-30)
LAST_BUILD_BEFORE, MERGED = FA_SPLIT_KV_FROM_BUILD - 1, "2026-01"


def _llama_build(r: dict) -> int | None:
    """The mainline build a row ran: its stated build number (b8125, 'build 7973', '(6263)'), or,
    for a row dated before the month the split-KV change was merged, the last tag before it (a
    build cannot hold a change made after the measurement); None when neither is known."""
    said = str(r.get("software_version") or "")
    m = re.search(r"\bb(\d{4,5})\b|build[: ]+(\d{4,5})\b|\((\d{4,5})\)", said)
    if m:
        return int(next(g for g in m.groups() if g))
    date = str(r.get("date") or "")
    if re.match(r"\d{4}-\d{2}", date) and date[:7] < MERGED:
        return LAST_BUILD_BEFORE
    return None


def _error_line(output: str) -> str:
    try:
        return json.loads(output)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return output.strip().splitlines()[0] if output.strip() else "failed"


def _reason(msg: str) -> str:
    if re.search(r"unknown (CPU|GPU)|not in the parts catalog", msg):
        return "part not in catalog: " + msg
    if "the CPU is unknown" in msg:
        return "CPU not stated"
    if "unknown quant" in msg:
        return "unknown quant: " + msg
    return msg


def _baselines(d: dict, hw: dict, r: dict) -> dict:
    """Decode tok/s of the two rooflines, from the estimate's memory items and the profile's peaks."""
    items = {(i["name"], i["device"]): i["bytes"] for i in d["memory"]["items"]}
    model = d["model"]
    k_over_n = model["n_experts_used"] / max(1, model["n_experts"])
    if r.get("n_experts_used") and model["n_experts"]:
        k_over_n = int(r["n_experts_used"]) / model["n_experts"]
    # the blocks -ngl leaves on the CPU count their weights as weights_dense_cpu
    dense = {"gpu": items.get(("weights_dense", "gpu"), 0),
             "host": items.get(("weights_dense", "host"), 0) + items.get(("weights_dense_cpu", "host"), 0)}
    experts = {"gpu": items.get(("weights_experts", "gpu"), 0), "host": items.get(("weights_experts_cpu", "host"), 0)}
    cpu_only = d["factors"]["cpu_only"]
    if cpu_only:
        dense = {"gpu": 0, "host": dense["gpu"] + dense["host"]}
        experts = {"gpu": 0, "host": experts["gpu"] + experts["host"]}
    cpu_bw = sum(n["dram_read_bytes_per_s"]["value"] for n in hw["numa_nodes"] if n.get("dram_read_bytes_per_s"))
    gpus = hw.get("gpus") or []
    gpu_bw = sum(g["mem_bw_bytes_per_s"]["value"] for g in gpus if g.get("mem_bw_bytes_per_s")) if gpus else 0
    out = {}
    for name, share in (("active", k_over_n), ("all", 1.0)):
        t = (dense["host"] + experts["host"] * share) / max(1.0, cpu_bw)
        if not cpu_only and gpu_bw:
            t += (dense["gpu"] + experts["gpu"] * share) / gpu_bw
        out[name] = 1.0 / t if t > 0 else None
    return out


def run_row(r: dict, runner: CliRunner, tmp: Path) -> Row:
    res = Row(r)
    if _num(r.get("tg_tps")):
        res.measured["decode"] = float(r["tg_tps"])
    if _num(r.get("pp_tps")):
        res.measured["prefill"] = float(r["pp_tps"])
    vram, notes = _num(r.get("vram_used_gb")), (r.get("notes") or "").lower()
    if vram and "requirement" not in notes and "at least" not in notes:
        # seed rows print GiB; llama.cpp users' "GB" are GiB too (nvidia-smi MiB)
        res.measured["vram"] = vram * GIB

    def skip_all(reason: str) -> Row:
        for m in res.measured:
            res.skip[m] = reason
        return res

    if not res.measured:
        return res
    backend = _backend(r.get("software"))
    res.backend = backend or str(r.get("software"))
    if r.get("speculative"):
        return skip_all("speculative decoding (draft acceptance not stated)")
    if backend is None:
        return skip_all(f"software {r.get('software')!r} is not a backend moeplan models")
    hargs, why = hardware_args(r)
    if hargs is None:
        return skip_all(why)
    out = runner.invoke(app, hargs)
    if out.exit_code:
        return skip_all(_reason(_error_line(out.output)))
    hw = json.loads(out.stdout)
    if "prefill" in res.measured and _prompt_len(r) is None:
        res.skip["prefill"] = "prompt length not stated"
    hw_path = tmp / f"{r['id']}.json"
    hw_path.write_text(json.dumps(hw))
    eargs, why = estimate_args(r, backend, hw_path)
    if eargs is None:
        return skip_all(why)
    out = runner.invoke(app, eargs)
    if out.exit_code:
        return skip_all(_reason(_error_line(out.output)))
    d = json.loads(out.stdout)
    for metric, key in (("decode", "decode_terms"), ("prefill", "prefill_terms")):
        g: dict[str, float] = {}
        for t in d[key]:
            g[GROUP.get(t["resource"], "fixed")] = g.get(GROUP.get(t["resource"], "fixed"), 0.0) + t["seconds"]
        res.groups[metric] = g
    res.prior = {"decode": d["decode_tok_s"], "prefill": d["prefill_tok_s"], "vram": d["vram_bytes"] or None}
    res.prior_range = {"decode": tuple(d["decode_tok_s_range"]), "prefill": tuple(d["prefill_tok_s_range"])}
    res.floor = {"decode": d.get("decode_tok_s_paging") or 0.0}
    if "vram" in res.measured and not d["vram_bytes"]:
        res.skip["vram"] = "CPU-only run: no VRAM predicted"
    if "decode" in res.measured and not res.groups["decode"].get("cpu") and not res.groups["decode"].get("gpu"):
        res.skip["decode"] = "no terms"
    res.baseline = _baselines(d, hw, r)
    roof = res.baseline.get("active")
    if "decode" in res.measured and "decode" not in res.skip and roof and res.measured["decode"] > roof:
        # every byte a token reads, once, at the peak bandwidth of the device holding it is a
        # physical bound: a figure above it contradicts the machine or the file the row states
        res.skip["decode"] = (f"measured decode above the stated machine's roofline ({roof:.1f} tok/s: the "
                              "active bytes at peak memory bandwidth): the hardware or file as stated cannot produce it")
    return res


# ---- fitting few machine factors --------------------------------------------------------------

def _param_keys(x: Row, metric: str) -> dict[str, str]:
    """Group -> name of the fitted factor that scales it (the CPU group per backend)."""
    keys = {}
    for g in x.groups.get(metric, {}):
        keys[g] = f"{metric}.{g}.{x.backend}" if g == "cpu" else f"{metric}.{g}"
    return keys


def predict(x: Row, metric: str, scales: dict[str, float]) -> float | None:
    if metric == "vram":
        return x.prior.get("vram")
    g = x.groups.get(metric)
    if not g:
        return None
    keys = _param_keys(x, metric)
    t = sum(sec * scales.get(keys[name], 1.0) for name, sec in g.items())
    return 1.0 / t if t > 0 else None


def fit(train: list[Row], metric: str) -> dict[str, float]:
    """Scales of the term groups minimising the absolute log error over the training rows (the
    median's loss: one wild row cannot drag a factor) plus a shrinkage towards 1 (coordinate
    descent over a log grid, every grid value of one scale scored at once)."""
    import numpy as np

    rows = [x for x in train if metric in x.measured and metric not in x.skip and x.groups.get(metric)]
    names = sorted({k for x in rows for k in _param_keys(x, metric).values()})
    scales = {n: 1.0 for n in names}
    if not rows:
        return scales
    grid = np.array([math.exp(i * 0.05) for i in range(-60, 61)])
    col = {n: i for i, n in enumerate(names)}
    sec = np.zeros((len(rows), len(names)))  # seconds per token of each row's groups, by scale
    for r, x in enumerate(rows):
        keys = _param_keys(x, metric)
        for g, t in x.groups[metric].items():
            sec[r, col[keys[g]]] += t
    log_meas = np.log([x.measured[metric] for x in rows])
    s = np.ones(len(names))
    for _ in range(4):
        for n in names:
            i = col[n]
            rest = sec @ s - sec[:, i] * s[i]
            t = rest[:, None] + sec[:, i][:, None] * grid[None, :]  # rows x grid
            with np.errstate(divide="ignore"):
                err = np.abs(-np.log(t) - log_meas[:, None]).sum(axis=0)
            shrink = SHRINK_ROWS * (np.abs(np.log(np.delete(s, i))).sum() + np.abs(np.log(grid)))
            s[i] = grid[int(np.argmin(err + shrink))]
    return {n: float(s[col[n]]) for n in names}


def _tier(x: Row, metric: str) -> str:
    """The row's range tier (cost/ranges.py tier_of_groups): 'cpu-bound' where the CPU carries at
    least CPU_BOUND_SHARE of the predicted time (all of it without a GPU term), else 'shared'."""
    return tier_of_groups(x.groups.get(metric) or {})


def _quantile(v: list[float], q: float) -> float:
    s = sorted(v)
    if not s:
        return float("nan")
    i = q * (len(s) - 1)
    lo, hi = int(math.floor(i)), int(math.ceil(i))
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


# rows, and sources they come from, a range tier needs for a range width of its own. The width
# weighs sources, not rows, and with S sources its conformal RANGE_QUANTILE needs a cumulative
# weight of q (S + 1): below S = (1 + q) / (1 - q) (9 at q = 0.8) that is more than all sources
# but the largest hold, so the width would be the tier's largest residual; such a tier takes
# the pooled width
MIN_GROUP_ROWS = 12
MIN_GROUP_SOURCES = math.ceil((1 + RANGE_QUANTILE) / (1 - RANGE_QUANTILE) - 1e-9)


def _residual(pred: float, measured: float, floor: float) -> tuple[float, bool]:
    """(log(pred/measured), whether the estimate's floor -- its range reaches down to it whatever
    the width -- lies at or below the measured figure)."""
    return math.log(pred / measured), bool(floor) and floor <= measured


def _score(e: float, floor_ok: bool, center: float) -> float:
    """The log half-width a range centred on prediction x exp(-center) needs to cover a row of
    log residual e (split conformal prediction with nested ranges [min(p e^(-c-w), floor),
    p e^(-c+w)]): only its upper end matters where the floor covers the low side."""
    return max(0.0, center - e) if floor_ok else abs(e - center)


def _range(pred: float, cw: tuple[float, float], floor: float) -> tuple[float, float]:
    c, w = cw
    lo = pred * math.exp(-c - w)
    return (min(lo, floor) if floor else lo), pred * math.exp(w - c)


def _center(free: list[tuple[float, str]]) -> float:
    """The source-weighted median of (log residual, source) rows; 0 (the model's own figure) for none."""
    return weighted_median([e for e, _ in free], [src for _, src in free]) if free else 0.0


def _center_width(res: list[tuple[float, bool, str]]) -> tuple[float, float]:
    """(c, w) from (log residual, floor covers, source) rows: c the median log residual of rows
    the floor does not cover (where the measured figures sit against the model's), w the
    conformal RANGE_QUANTILE of the scores about it; both weigh every source the same (a row
    1/n of its source's n rows) and w has the weighted finite-sample correction
    (cost/ranges.py weighted_conformal_quantile): the next machine is a new source. The centre
    is fitted on rows too, so each row is scored about the centre of the other sources' rows
    (leave-one-source-out, as jackknife+ does): a row that helped set c sits nearer it than the
    next machine's will."""
    free = [(e, src) for e, ok, src in res if not ok]
    without = {s: _center([(e, t) for e, t in free if t != s]) for s in sorted({src for _, _, src in res})}
    return _center(free), weighted_conformal_quantile([_score(e, ok, without[src]) for e, ok, src in res],
                                                      [src for _, _, src in res], RANGE_QUANTILE)


def range_widths(residuals: list[tuple[str, float, bool, str]]) -> dict[str, tuple[float, float]]:
    """(log centre, log half-width) per range tier from (tier, log residual, floor covers,
    source) rows held out: at least MIN_GROUP_ROWS rows from MIN_GROUP_SOURCES sources, else the
    pooled figure under 'all' (one source's rows share its machine and say little about the next
    one's)."""
    out = {"all": _center_width([(e, ok, src) for _, e, ok, src in residuals])} if residuals else {}
    for g in sorted({r[0] for r in residuals}):
        v = [(e, ok, src) for gg, e, ok, src in residuals if gg == g]
        if len(v) >= MIN_GROUP_ROWS and len({src for _, _, src in v}) >= MIN_GROUP_SOURCES:
            out[g] = _center_width(v)
    return out


def source_spread(residuals: list[tuple[str, float, bool, str]]) -> dict:
    """How calibration rows' log residuals spread between sources and within one -- a per-source
    random effect, read robustly: `between` the median over sources of |the source's median
    residual - the source-weighted centre|, `within` the median over sources of several rows of
    their rows' median |residual - the source's median|. A range for the next machine needs the
    between-source spread; within-source spread alone (one machine's configurations) would narrow
    it, which is why every source weighs 1 in the calibration."""
    by: dict[str, list[float]] = {}
    for _, e, _, src in residuals:
        by.setdefault(src, []).append(e)
    if not by:
        return {"between": 0.0, "within": 0.0, "sources": 0, "multi": 0}
    c = weighted_median([e for _, e, _, _ in residuals], [src for _, _, _, src in residuals])
    med = {s: statistics.median(v) for s, v in by.items()}
    multi = [statistics.median(abs(e - med[s]) for e in v) for s, v in by.items() if len(v) > 1]
    return {"between": statistics.median(abs(m - c) for m in med.values()),
            "within": statistics.median(multi) if multi else 0.0, "sources": len(by), "multi": len(multi)}


def evaluate(rows: list[Row]) -> dict:
    """Prior, fitted and held-out predictions and ranges per row and metric, TRAIN rows only
    informing anything: the scales are fitted on train rows; a train row is predicted from the
    scales fitted without its source (leave-one-source-out) and its range set by the other train
    sources' held-out residuals; a test row is predicted from the scales of all train rows and its
    range set by all train rows' held-out residuals -- the figures that ship (--write-fit). The
    rows of an anchor source (Row.anchor: a prior was set from them, benchmarks/anchors.py) set
    no range: their residuals are the priors' training error."""
    est = {m: [x for x in rows if m in x.measured and m not in x.skip and x.prior.get(m)] for m in METRICS}
    out: dict = {m: {} for m in METRICS}
    for m in ("decode", "prefill"):
        train = [x for x in rows if x.side == "train"]
        full = fit(train, m)
        cv: dict[str, float] = {}
        for src in sorted({x.source for x in est[m] if x.side == "train"}):
            s = fit([x for x in train if x.source != src], m)
            for x in est[m]:
                if x.source == src:
                    cv[x.row["id"]] = predict(x, m, s) or 0.0  # est rows have terms: never None
        for x in est[m]:
            if x.side == "test":
                cv[x.row["id"]] = predict(x, m, full) or 0.0
        # held-out residuals of train rows only: the fitted scales' and the prior's (which has
        # no fitted factor: its residuals are held out already)
        calib = [x for x in est[m] if x.side == "train" and not x.anchor]
        resid = {x.row["id"]: (_tier(x, m), *_residual(cv[x.row["id"]], x.measured[m], x.floor.get(m, 0.0)),
                               x.source) for x in calib}
        resid_p = {x.row["id"]: (_tier(x, m), *_residual(x.prior[m], x.measured[m], x.floor.get(m, 0.0)),
                                 x.source) for x in calib}
        widths, widths_p = range_widths(list(resid.values())), range_widths(list(resid_p.values()))
        for x in est[m]:
            rid = x.row["id"]
            if x.side == "train":
                # the range of a held-out train row: the other train sources' residuals
                w = range_widths([v for k, v in resid.items() if v[3] != x.source])
                wp = range_widths([v for k, v in resid_p.items() if v[3] != x.source])
            else:
                w, wp = widths, widths_p
            wx = w.get(_tier(x, m), w.get("all", (0.0, 0.0)))
            wpx = wp.get(_tier(x, m), wp.get("all", (0.0, 0.0)))
            fl = x.floor.get(m, 0.0)
            out[m][rid] = {"side": x.side, "prior": x.prior[m], "prior_range": _range(x.prior[m], wpx, fl),
                           "in_sample": predict(x, m, full), "loso": cv[rid],
                           "loso_range": _range(cv[rid], wx, fl),
                           "measured": x.measured[m]}
        out[m]["_fit"] = full
        out[m]["_widths"] = widths
        out[m]["_prior_widths"] = widths_p
        out[m]["_spread"] = source_spread(list(resid.values()))
        out[m]["_prior_spread"] = source_spread(list(resid_p.values()))
        out[m]["_range_sources"] = sorted({x.source for x in calib})
        out[m]["_tier_rows"] = {t: (sum(1 for x in calib if _tier(x, m) == t),
                                    len({x.source for x in calib if _tier(x, m) == t})) for t in RANGE_TIERS}
    for x in est["vram"]:
        out["vram"][x.row["id"]] = {"side": x.side, "prior": x.prior["vram"], "in_sample": x.prior["vram"],
                                    "loso": x.prior["vram"], "measured": x.measured["vram"], "prior_range": None,
                                    "loso_range": None}
    return out


# ---- ranking: what the planner uses ----------------------------------------------------------

SWEEPS = HERE / "data" / "thread-sweeps.json"
RANK_DIFF = 0.10  # pairs whose measured figures differ by more than this count for the order


def sweep_rows(path: Path = SWEEPS) -> list[dict]:
    """thread-sweeps.json as measurement rows (one per thread count), for the ranking report:
    CPU-only llama-bench tg128 on one CPU (benchmarks/data/README.md)."""
    if not path.exists():
        return []
    out = []
    for i, sw in enumerate(json.loads(path.read_text())["sweeps"]):
        if not any(re.search(pat, sw["model"].lower()) for pat, _ in MODEL_MAP):
            continue  # a dense model moeplan has no profile of (LLaMA-3.x, Bitnet, TriLM)
        for n, y in zip(sw["threads"], sw["tg_tok_s"]):
            out.append({"id": f"sweep{i}-t{n}", "source_url": sw["source_url"], "machine_class": None,
                        "cpu_model": sw["cpu"], "cpu_sockets": 1, "model_name": sw["model"], "quant": sw["quant"],
                        "software": sw["backend"], "offload_method": "cpu-only", "threads": n, "tg_tps": y,
                        "tg_test": "tg128", "sweep": i})
    return out


def _machine_key(r: dict) -> tuple:
    """One machine and model of one source: what the planner's choices (placement, threads,
    ubatch, backend, depth) vary over."""
    return (split.source_key(r.get("source_url") or r["id"]), r.get("sweep"), r.get("cpu_model"),
            r.get("cpu_sockets"), r.get("gpu_model"), r.get("model_name"))


def ranking(rows: list[Row], scales: dict[str, dict[str, float]]) -> dict:
    """For every machine+model of one source with several estimable configurations: pairs of
    them, whether the predicted order matches the measured one (pairs whose measured figures
    differ by more than RANK_DIFF) and |predicted ratio / measured ratio - 1| (every pair), per
    metric and side. Predictions as shipped (`scales` {} = the mechanisms alone)."""
    out: dict = {}
    for m in ("decode", "prefill"):
        groups: dict[tuple, list[tuple[Row, float]]] = {}
        for x in rows:
            if m in x.measured and m not in x.skip and x.groups.get(m):
                p = predict(x, m, scales.get(m, {}))
                if p:
                    groups.setdefault(_machine_key(x.row), []).append((x, p))
        for side in ("train", "test"):
            right = differ = 0
            errs: list[float] = []
            n_groups = 0
            for g in groups.values():
                if len(g) < 2 or g[0][0].side != side:
                    continue
                n_groups += 1
                for i in range(len(g)):
                    for j in range(i + 1, len(g)):
                        (a, pa), (b, pb) = g[i], g[j]
                        mr, pr = a.measured[m] / b.measured[m], pa / pb
                        errs.append(abs(pr / mr - 1))
                        if abs(math.log(mr)) > math.log(1 + RANK_DIFF):
                            differ += 1
                            right += (pr > 1) == (mr > 1)
            out[f"{m}.{side}"] = {"machines": n_groups, "pairs": len(errs), "pairs_differing": differ,
                                  "order_right": right / differ if differ else None,
                                  "ratio_err": statistics.median(errs) if errs else None}
    return out


# ---- report ----------------------------------------------------------------------------------

def _stats(pairs: list[tuple[float, float]], ranges: list | None = None, sources: list[str] | None = None) -> dict:
    """Median error; with ranges, the share of rows inside their range, the median half-width
    and (with sources) the coverage with every source weighing the same (the share the
    calibration aims at: cost/ranges.py weighted_conformal_quantile)."""
    errs = [abs(p / m - 1) for p, m in pairs if p and m]
    d = {"n": len(errs), "median_err": statistics.median(errs) if errs else None}
    if ranges:
        kept = [(lo <= m <= hi, (hi - lo) / 2 / p, src) for (lo, hi), (p, m), src
                in zip(ranges, pairs, sources or [""] * len(pairs), strict=True) if lo is not None]
        d["coverage"] = sum(c for c, _, _ in kept) / len(kept) if kept else None
        d["half_width"] = statistics.median(h for _, h, _ in kept) if kept else None
        if sources and kept:
            w = source_weights([src for _, _, src in kept])
            d["coverage_by_source"] = sum(wi for wi, (c, _, _) in zip(w, kept, strict=True) if c) / sum(w)
    return d


def summary(rows: list[Row], ev: dict, select=lambda x: True) -> dict:
    by_id = {x.row["id"]: x for x in rows}
    out = {}
    for m in METRICS:
        ids = [i for i in ev[m] if not i.startswith("_") and select(by_id[i])]
        e = [ev[m][i] for i in ids]
        srcs = [by_id[i].source for i in ids]
        s = {"prior": _stats([(v["prior"], v["measured"]) for v in e],
                             [v["prior_range"] for v in e] if m != "vram" else None, srcs),
             "in_sample": _stats([(v["in_sample"], v["measured"]) for v in e]),
             "loso": _stats([(v["loso"], v["measured"]) for v in e],
                            [v["loso_range"] for v in e] if m != "vram" else None, srcs)}
        if m == "decode":
            for b in ("active", "all"):
                s[f"roofline_{b}"] = _stats([(by_id[i].baseline.get(b), ev[m][i]["measured"]) for i in ids])
        out[m] = s
    return out


def tier_summary(rows: list[Row], ev: dict, ship: dict[str, str]) -> dict:
    """{metric: {tier: {SIDES key: _stats of the shipped figure}}}: how each range tier's range
    holds, per column (the tier of a row is that of its own terms, cost/ranges.py range_tier)."""
    by_id = {x.row["id"]: x for x in rows}
    out: dict = {}
    for m in ("decode", "prefill"):
        rng = "prior_range" if ship[m] == "prior" else "loso_range"
        for t in RANGE_TIERS:
            for k, _ in SIDES:
                sel = select_side(k)
                ids = [i for i in ev[m] if not i.startswith("_") and sel(by_id[i]) and _tier(by_id[i], m) == t]
                out.setdefault(m, {}).setdefault(t, {})[k] = _stats(
                    [(ev[m][i][ship[m]], ev[m][i]["measured"]) for i in ids], [ev[m][i][rng] for i in ids],
                    [by_id[i].source for i in ids])
    return out


def _fmt(s: dict, key: str) -> str:
    v = s.get(key)
    return "   -" if v is None else f"{v:5.1%}"


FIGURES = {"prior": "model (no fit)", "loso": "refit", "in_sample": "refit in-sample",
           "roofline_active": "roofline active", "roofline_all": "roofline all bytes"}


# the columns every table prints: (key, label); a train row is held out by source within train
SIDES = (("train", "train (all)"), ("train_na", "train non-anchor"), ("test", "test"))


def select_side(side: str):
    """The rows of a column of SIDES."""
    if side == "train_na":
        return lambda x: x.side == "train" and not x.anchor
    return lambda x: x.side == side


def print_table(title: str, cols: dict[str, dict]) -> None:
    """One table, the SIDES side by side: train rows held out by source (LOSO within train), the
    train rows of no anchor source (whose residuals no prior was set from), test rows predicted
    from all train rows."""
    print(f"\n{title}")
    head = f"{'rows':>4} {'med err':>7} {'cover':>6} {'half-w':>6}"
    print(f"  {'metric':8} {'figure':18} | " + " | ".join(f"{label + ':':17} {head}" for _, label in SIDES))
    first = cols[SIDES[0][0]]
    for m in first:
        for name in first[m]:
            st = [cols[k][m].get(name, {"n": 0}) for k, _ in SIDES]
            if name == "in_sample":
                st[-1] = {"n": 0}  # a test row is never in the sample
            if not any(s["n"] for s in st):
                continue

            def fmt(s: dict) -> str:
                return (f"{s['n']:4d} {_fmt(s, 'median_err'):>7} {_fmt(s, 'coverage'):>6} "
                        f"{_fmt(s, 'half_width'):>6}")
            print(f"  {m:8} {FIGURES.get(name, name):18} | " + " | ".join(f"{'':17} {fmt(s)}" for s in st))


def ships_fit(overall: dict) -> dict[str, bool]:
    """Per metric, whether the fitted scales ship: only if they predict held-out TRAIN sources
    better than the mechanisms alone -- by more than SHIP_MARGIN of median error (on ~60 rows one
    row moves the median by about a third of a point) -- with a held-out range no wider; else the
    prior ships, with its own residuals' widths. `overall` is the summary of the train rows of no
    anchor source (on an anchor row the prior is scored in-sample, the scales held out): the test
    split decides nothing."""
    return {m: (overall[m]["loso"]["median_err"] or 1.0) < (overall[m]["prior"]["median_err"] or 0.0) - SHIP_MARGIN
            and (overall[m]["loso"].get("half_width") or 9.0) <= (overall[m]["prior"].get("half_width") or 0.0)
            for m in ("decode", "prefill")}


def fit_json(res: list[Row], ev: dict, use_fit: dict[str, bool]) -> dict:
    """moeplan/profiles/fit.json: scales and range widths from TRAIN rows only."""
    shipped = {m: ev[m]["_widths" if use_fit[m] else "_prior_widths"] for m in ("decode", "prefill")}
    used = sorted({x.source for x in res if x.side == "train" and any(
        m in x.measured and m not in x.skip for m in ("decode", "prefill"))})
    return {"about": "term-group time scales fitted on the TRAIN split of benchmarks/data/measurements.jsonl "
                     "(benchmarks/split.py) by benchmarks/accuracy.py --write-fit, kept only where they beat the "
                     "unfitted model on held-out train sources; range_log_center = median log(predicted/measured), "
                     "range_log_half_width = 80th percentile (weighted conformal) of |log residual - centre| of "
                     "train rows held out by source, every source weighing 1 (a row 1/n of its source's n), by "
                     "range tier (cpu-bound: the CPU's terms carry >= 80% of the predicted time; shared: the rest; "
                     "'all' pooled, for a tier of too few sources): the range is prediction x exp(-centre -/+ "
                     "half-width) (docs/cost-model.md), each row scored about the centre of the other sources' rows. "
                     "The rows of anchor_sources (named by a prior as its evidence, benchmarks/anchors.py) set no range. "
                     "No test row informs any figure here.",
            "split_rule": split.RULE,
            "fitted_on_sources": used,
            "anchor_sources": sorted({x.source for x in res if x.anchor}),
            "range_set_on_sources": {m: ev[m]["_range_sources"] for m in ("decode", "prefill")},
            "n_rows": {m: len([i for i, v in ev[m].items() if not i.startswith("_") and v["side"] == "train"])
                       for m in ("decode", "prefill")},
            "scales": {m: ev[m]["_fit"] if use_fit[m] else {} for m in ("decode", "prefill")},
            "range_log_half_width": {m: {g: round(cw[1], 6) for g, cw in w.items()} for m, w in shipped.items()},
            "range_log_center": {m: {g: round(cw[0], 6) for g, cw in w.items()} for m, w in shipped.items()}}


DOC_BEGIN = "<!-- accuracy.py:begin (generated by benchmarks/accuracy.py --write-docs; do not edit) -->"
DOC_END = "<!-- accuracy.py:end -->"
DOC_FILES = [HERE.parent / "docs" / "cost-model.md", HERE.parent / "docs" / "benchmarks.md"]


def doc_block(cols: dict[str, dict], ship: dict[str, str], rank: dict, n_split: dict,
              spread: dict | None = None, tiers: dict | None = None) -> str:
    """The figures docs/ quote, as a markdown block (regenerated and checked in CI); cols: a
    summary per SIDES key; tiers: {metric: {'stats': tier_summary's, 'widths': the shipped
    (c, w) by tier, 'rows': (calibration rows, sources) by tier}}."""
    def f(v) -> str:
        return "–" if v is None else f"{v:.1%}"
    lines = [f"Split (benchmarks/split.py, rule fixed before any tuning): train {n_split['train'][0]} sources / "
             f"{n_split['train'][1]} rows, test {n_split['test'][0]} sources / {n_split['test'][1]} rows; "
             f"of the train ones, {n_split['anchor'][0]} sources / {n_split['anchor'][1]} rows are anchors, named "
             "by a prior as its evidence (benchmarks/anchors.py): their residuals are the priors' training error, "
             "so they set no range and the train non-anchor columns leave them out. "
             "Train rows are held out by source (leave-one-source-out within train); test rows are predicted "
             "from all train rows and nothing was fitted or chosen on them. Shipped: " +
             ", ".join(f"{m} {'refit' if v == 'loso' else 'model (no fit)'}" for m, v in ship.items()) + ".",
             "",
             "| metric | figure | " + " | ".join(f"{label} rows | {label} median err | {label} coverage / half-width"
                                                for _, label in SIDES) + " |",
             "|---|---|" + "---|---|---|" * len(SIDES)]
    for m in METRICS:
        for name in ("prior", "loso", "roofline_active", "roofline_all"):
            st = [cols[k][m].get(name) for k, _ in SIDES]
            if not st[0] or not any(s["n"] for s in st):
                continue
            shipped = " (shipped)" if ship.get(m) == name or (m == "vram" and name == "prior") else ""
            cov = (lambda s: f"{f(s.get('coverage'))} / {f(s.get('half_width'))}" if "coverage" in s else "–")
            lines.append(f"| {m} | {FIGURES[name]}{shipped} | " +
                         " | ".join(f"{s['n']} | {f(s['median_err'])} | {cov(s)}" for s in st) + " |")
    lines += ["", "Range coverage with every source weighing the same (a row 1/n of its source's n rows: what "
              "the source-weighted calibration aims at 80% for): " +
              "; ".join(f"{m} " + ", ".join(f"{label} {f(cols[k][m][ship[m]].get('coverage_by_source'))}"
                                           for k, label in SIDES) for m in ("decode", "prefill")) + "."]
    if spread:
        lines += ["", "Where the shipped ranges' width comes from (the calibration rows' log residuals, "
                  "benchmarks/accuracy.py source_spread): " +
                  "; ".join(f"{m}: between sources {v['between']:.2f}, within a source {v['within']:.2f} "
                            f"({v['sources']} sources, {v['multi']} of them with several rows)"
                            for m, v in spread.items()) + "."]
    if tiers:
        def tier_txt(m: str, t: str) -> str:
            v = tiers[m]
            n, srcs = v["rows"][t]
            own = t in v["widths"]
            c, w = v["widths"][t if own else "all"]
            st = v["stats"][t]
            return (f"{t} {n} rows / {srcs} sources, " + (f"c = {c:.2f}, w = {w:.2f}" if own else
                                                          f"pooled c = {c:.2f}, w = {w:.2f} (too few sources)") +
                    ", coverage " + ", ".join(f"{label} {f(st[k].get('coverage'))} / "
                                              f"{f(st[k].get('coverage_by_source'))} ({st[k]['n']} rows)"
                                              for k, label in SIDES))
        lines += ["", f"Range tiers (cost/ranges.py range_tier: cpu-bound where the CPU's terms carry at least "
                  f"{CPU_BOUND_SHARE:.0%} of the predicted time, else shared; c and w from the tier's train "
                  "non-anchor rows; coverage by rows / with every source weighing the same): " +
                  "; ".join(f"{m}: " + "; ".join(tier_txt(m, t) for t in RANGE_TIERS) for m in tiers) + "."]
    lines += ["", "Ranking (pairs of configurations of one machine and model from one source; order counted on "
              f"pairs whose measured figures differ by more than {RANK_DIFF:.0%}; ratio error "
              "= median |predicted ratio / measured ratio - 1| over all pairs):", "",
              "| metric | split | machines | pairs | pairs differing | order right | ratio error |",
              "|---|---|---|---|---|---|---|"]
    for k, v in rank.items():
        m, side = k.split(".")
        lines.append(f"| {m} | {side} | {v['machines']} | {v['pairs']} | {v['pairs_differing']} | "
                     f"{f(v['order_right'])} | {f(v['ratio_err'])} |")
    return "\n".join(lines) + "\n"


def with_block(text: str, block: str) -> str | None:
    """text with its generated block replaced; None when it has no markers."""
    if DOC_BEGIN not in text or DOC_END not in text:
        return None
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    return f"{head}{DOC_BEGIN}\n{block}{DOC_END}{tail}"


def run_all(data: Path) -> tuple[list[Row], list[Row]]:
    """(measurement rows, thread-sweep rows) run through `moeplan hardware` and `estimate`."""
    rows = [json.loads(x) for x in data.read_text().splitlines() if x.strip()]
    # the model is scored without any fitted factor: the fit is what this script produces
    saved = backends_mod.fitted_terms
    backends_mod.fitted_terms = lambda backend: {}
    runner = CliRunner()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            res = [run_row(r, runner, Path(tmp)) for r in rows]
            sw = [run_row(r, runner, Path(tmp)) for r in sweep_rows()]
    finally:
        backends_mod.fitted_terms = saved
    mark_anchors(res, rows)
    return res, sw


def mark_anchors(res: list[Row], rows: list[dict]) -> set[str]:
    """Flag the rows of every source a prior names as its anchor (benchmarks/anchors.py); the
    anchor sources."""
    found = set(anchors.anchor_sources(rows))
    for x in res:
        x.anchor = x.source in found
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", action="store_true", help="also print every row's figures")
    ap.add_argument("--write-fit", action="store_true",
                    help="store the train-row fit in moeplan/profiles/fit.json")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the generated blocks in docs/")
    ap.add_argument("--check", action="store_true",
                    help="fail (exit 1) when fit.json or docs/' generated blocks differ from what the data gives")
    a = ap.parse_args(argv)
    if not a.data.exists():
        print(f"error: {a.data} not found\nhint: pass --data PATH/measurements.jsonl", file=sys.stderr)
        return 2
    res, sweeps = run_all(a.data)
    ev = evaluate(res)
    cols = {k: summary(res, ev, select_side(k)) for k, _ in SIDES}
    tr, te = cols["train"], cols["test"]
    use_fit = ships_fit(cols["train_na"])
    ship = {m: "loso" if use_fit[m] else "prior" for m in TARGETS}
    spread = {m: ev[m]["_spread" if use_fit[m] else "_prior_spread"] for m in TARGETS}
    rank = ranking(res + sweeps, {m: ev[m]["_fit"] if use_fit[m] else {} for m in ("decode", "prefill")})
    srcs = {s: {x.source for x in res if select_side(s)(x)} for s in ("train", "test")}
    srcs["anchor"] = {x.source for x in res if x.anchor}
    n_split = {s: (len(v), sum(1 for x in res if x.source in v)) for s, v in srcs.items()}
    fit_text = json.dumps(fit_json(res, ev, use_fit), indent=1, sort_keys=True) + "\n"
    tier_stats = tier_summary(res, ev, ship)
    tiers = {m: {"stats": tier_stats[m], "rows": ev[m]["_tier_rows"],
                 "widths": ev[m]["_widths" if use_fit[m] else "_prior_widths"]} for m in TARGETS}
    block = doc_block(cols, ship, rank, n_split, spread, tiers)
    if a.check:
        stale = [] if FIT_PATH.exists() and FIT_PATH.read_text() == fit_text else [str(FIT_PATH)]
        for p in DOC_FILES:
            t = p.read_text() if p.exists() else ""
            if with_block(t, block) != t:
                stale.append(str(p))
        if stale:
            print("error: not what the data and the model give: " + ", ".join(stale) +
                  "\nhint: python benchmarks/accuracy.py --write-fit --write-docs", file=sys.stderr)
            return 1
        print("fit.json and the docs' generated blocks match the data")
        return 0
    if a.write_fit:
        from moeplan.io import write_text_atomic
        write_text_atomic(FIT_PATH, fit_text)
        print(f"wrote {FIT_PATH}")
    if a.write_docs:
        from moeplan.io import write_text_atomic
        for p in DOC_FILES:
            new = with_block(p.read_text(), block)
            if new is None:
                print(f"error: {p} has no {DOC_BEGIN!r} ... {DOC_END!r} block", file=sys.stderr)
                return 2
            write_text_atomic(p, new)
            print(f"wrote {p}")
    by_backend = {b: {k: summary(res, ev, lambda x, b=b, s=select_side(k): x.backend == b and s(x)) for k, _ in SIDES}
                  for b in sorted({x.backend for x in res if x.groups})}
    by_class = {c: {k: summary(res, ev, lambda x, c=c, s=select_side(k): x.machine == c and s(x)) for k, _ in SIDES}
                for c in sorted({x.machine for x in res if x.groups})}
    skipped = [(x.row["id"], m, why) for x in res for m, why in x.skip.items()]
    if a.json:
        print(json.dumps({"split": n_split, "train": tr, "train_non_anchor": cols["train_na"], "test": te,
                          "anchor_sources": sorted(srcs["anchor"]), "spread": spread, "ranking": rank,
                          "by_backend": by_backend, "by_class": by_class, "range_tiers": tier_stats,
                          "rows": {m: {k: v for k, v in ev[m].items()} for m in METRICS},
                          "not_estimable": skipped}, indent=1, default=str))
        return 0
    if a.rows:
        print(f"{'row':52} {'side':5} {'metric':8} {'measured':>9} {'prior':>8} {'refit':>8} {'refit range':>17}")
        for m in METRICS:
            for rid, v in ev[m].items():
                if rid.startswith("_"):
                    continue
                scale = GIB if m == "vram" else 1
                rng = v["loso_range"]
                rtxt = f"{rng[0] / scale:7.1f}-{rng[1] / scale:<7.1f}" if rng else ""
                print(f"{rid[:52]:52} {v['side']:5} {m:8} {v['measured'] / scale:9.1f} {v['prior'] / scale:8.1f} "
                      f"{v['loso'] / scale:8.1f} {rtxt:>17} {v['loso'] / v['measured'] - 1:+5.0%}")
    n_est = {m: len([i for i in ev[m] if not i.startswith("_")]) for m in METRICS}
    n_meas = {m: sum(1 for x in res if m in x.measured) for m in METRICS}
    print(f"split (benchmarks/split.py): train {n_split['train'][0]} sources, {n_split['train'][1]} rows "
          f"(anchors of priors, benchmarks/anchors.py: {n_split['anchor'][0]} sources, {n_split['anchor'][1]} rows); "
          f"test {n_split['test'][0]} sources, {n_split['test'][1]} rows")
    print("rows estimable / with a measured figure: " +
          ", ".join(f"{m} {n_est[m]}/{n_meas[m]}" for m in METRICS))
    print_table("overall (error = |predicted/measured - 1|; coverage = measured inside the printed range; "
                "train: held out by source within train; train non-anchor: the train rows no prior was set "
                "from, the ranges' calibration rows; test: predicted from all train rows)", cols)
    for b, c3 in by_backend.items():
        print_table(f"backend {b}", c3)
    for c, c3 in by_class.items():
        print_table(f"machine class {c}", c3)
    print("\nfitted factors (all train rows):")
    for m in ("decode", "prefill"):
        print(f"  {m}: " + ", ".join(f"{k.split('.', 1)[1]}={v:.2f}" for k, v in ev[m]["_fit"].items()))
        print(f"  {m} range log centre/half-width by range tier: " +
              ", ".join(f"{k}={c:+.2f}/{w:.2f}" for k, (c, w) in ev[m]["_widths"].items()) + "; of the prior: " +
              ", ".join(f"{k}={c:+.2f}/{w:.2f}" for k, (c, w) in ev[m]["_prior_widths"].items()))
        sp = spread[m]
        print(f"  {m} log residual spread of the shipped range's calibration rows: between sources {sp['between']:.2f}, "
              f"within a source {sp['within']:.2f} ({sp['sources']} sources, {sp['multi']} with several rows)")
    print(f"\nrange tiers (cpu-bound: CPU terms >= {CPU_BOUND_SHARE:.0%} of the time; coverage rows / "
          "every source weighing the same, median half-width):")
    for m in TARGETS:
        for t in RANGE_TIERS:
            print(f"  {m:8} {t:9} " + " | ".join(
                f"{label}: {tier_stats[m][t][k]['n']:3d} rows {_fmt(tier_stats[m][t][k], 'coverage')} / "
                f"{_fmt(tier_stats[m][t][k], 'coverage_by_source')} half-w {_fmt(tier_stats[m][t][k], 'half_width')}"
                for k, label in SIDES))
    print(f"\nranking (pairs of one machine and model of one source; order on pairs differing > {RANK_DIFF:.0%}):")
    for k, v in rank.items():
        print(f"  {k:14} machines {v['machines']:3d} pairs {v['pairs']:4d} differing {v['pairs_differing']:4d} "
              f"order right {_fmt(v, 'order_right')} ratio error {_fmt(v, 'ratio_err')}")
    for side, st in (("train (held out by source)", tr), ("train non-anchor (held out by source)", cols["train_na"]),
                     ("TEST", te)):
        print(f"\ntargets, {side} (" + ", ".join(f"{m}: {FIGURES[f]}" for m, f in ship.items()) + " ships): " +
              ", ".join(f"{m} median err {st[m][ship[m]]['median_err'] or float('nan'):.1%} (<= {t:.0%})"
                        for m, t in TARGETS.items()) +
              f", decode coverage {st['decode'][ship['decode']].get('coverage') or 0:.1%} (>= {COVERAGE_TARGET:.0%})"
              f" half-width {st['decode'][ship['decode']].get('half_width') or 0:.1%} (<= {HALF_WIDTH_TARGET:.0%})"
              f"; coverage with every source weighing the same: decode "
              f"{st['decode'][ship['decode']].get('coverage_by_source') or 0:.1%}, prefill "
              f"{st['prefill'][ship['prefill']].get('coverage_by_source') or 0:.1%}")
    print(f"\nnot estimable ({len(skipped)} figures):")
    reasons: dict[str, list[str]] = {}
    for rid, m, why in skipped:
        reasons.setdefault(why, []).append(f"{rid} [{m}]")
    for why, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ids):2d}  {why}")
        for i in ids:
            print(f"        {i}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
