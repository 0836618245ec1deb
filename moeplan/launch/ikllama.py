"""ik_llama.cpp: its llama-server (launch.sh), llama-cli (complete.sh), llama-bench (bench.sh).

Read from ik_llama.cpp's source at commit 8337e4cd3 (2026-08-15, "Fix Qwen35+ MTP (#2322)"):
common/common.cpp (gpt_params_find_arg, gpt_params_print_usage), common/common.h (defaults),
examples/llama-bench/llama-bench.cpp, src/llama.cpp, src/llama-load-tensors.cpp,
ggml/src/ggml-backend.cpp and ggml/src/ggml-cuda.cu. Without a binary the flags come from
IK_RELEASE below (its help, tests/data/help/ik_llama.cpp-8337e4cd3); with --bin (or an ik
build on PATH) the build's own `--help` decides, so older builds get their spelling:

  release                       flash attention            fused MoE (up/gate)
  up to 70c0095e1 (2025-10-24)  `-fa` switch, default off  `-fmoe` switch, default off
  PR #863 (41d6c42b9)           only `-no-fa`, default on  only `-no-fmoe`, default on
  PR #944 (874926800) and later `-fa on|off|auto|0|1` and `-no-fa`; `-no-fmoe`

llama-bench keeps `-fa <0|1>` and `-fmoe <0|1>` throughout (default 1 since #863).

What the source says, and what moeplan does with it:
  * -mla N: 0 standard attention, 1 MLA with K and V^T cache, 2 MLA with only the K cache, 3
    "the best of both worlds" (common.h); default 3 since #863 (0 before). A GGUF without
    attn_kv_b (converted by mainline: attn_k_b/attn_v_b only) gets it computed at load
    (llm_prepare_mla, "Computed blk.N.attn_kv_b.weight ... stored in buffer ...", one extra
    buffer per block on its device) and runs -mla 3, checked on a CPU+RPC build
    (tests/data/ik_runs/); only without k_b/v_b either would ik say "missing wkv_b" and fall
    back to -mla 1. moeplan emits -mla 3 for MLA models (llama-bench parses -mla as an
    integer; its help still lists <0|1|2>).
  * -amb N (MiB, default 256 since #2312 (37d82c231, 2026-08-13), 0 = no splitting before):
    MLA's attention in head groups; without flash attention each group's K*Q stays near N MiB
    (src/graphs/build_deepseek2.cpp L1089-1140), with it and -mla 2/3 at prompt batches (L925-
    1022) each group's decompressed K/V. planner/memory/compute_buffer.py prices the first
    (ik_kq_heads); moeplan emits `-amb N` only for a plan that sets it (Placement.options.amb),
    otherwise the default applies.
  * -rtr: repacks the host tensors that have a row-interleaved variant at load time
    (src/llama.cpp, iqk_repack_tensor) and sets use_mmap = false (common.cpp). Emitted only for a
    plan that asks for it (Placement.options.rtr, what `estimate --rtr` costs): an interleaved
    type is not among the types iqk_mul_mat converts to its int8 GEMM
    (MulMat::is_dequant_better), so prefill multiplies it with the type's own kernel, about a
    third as fast (ik_llama.cpp PR 2474: IQ*_R4 146-162 t/s against 451-461 converted), while
    decode runs at the base type's speed (PR 517). Any other plan without mmap gets --no-mmap,
    with --mlock for mlock plans; llama-bench gets -rtr 0|1 and -mmp 0|1 to match.
  * -ser K,t (smart expert reduction) changes the experts used per token by a threshold;
    moeplan changes k only through --override-kv ARCH.expert_used_count, as for mainline.
  * -ot PATTERN=BUFT,...: std::regex_search over tensor names in command-line order, first
    match wins; a host buffer type (CPU) is replaced by the default CPU buffer type (pinned
    host memory on CUDA builds). The loader logs
    `Tensor blk.N.ffn_up_exps.weight (size = X MiB) buffer type overridden to CPU` (capital
    T, unlike mainline's `tensor ...`). llama-bench splits one -ot on ',' (mainline: ';') and
    exits 1 on an unknown buffer type; its JSON reports `override_tensor` (not mainline's
    `tensor_buft_overrides`; builds before 2026 do not report it).
  * --n-cpu-moe N (-ncmoe) in llama-server/llama-cli keeps the experts of the *last* N MoE
    blocks (MTP blocks excluded) on the CPU with one GPU (src/llama-load-tensors.cpp), though
    its help says "first N layers"; with several GPUs and -sm layer it spreads them over the
    GPUs. llama-bench's --n-cpu-moe N takes blocks 0..N-1. moeplan never emits either and
    writes explicit -ot patterns, so the blocks are the plan's.
  * op offload: ik copies CPU-resident experts to the GPU for a MoE op when
    ubatch * k >= 32 * n_experts (ggml-cuda.cu, k = experts used per token; 32 is
    GGML_CUDA_MIN_BATCH_OFFLOAD, `-cuda offload-batch-size=N` changes it). With DeepSeek (256
    experts, k = 8) that is -ub >= 1024. `-op OP,0|1,...` sets the offload policy per ggml op;
    an op id outside the op enum (-1) sets every op, so `-op -1,0` turns op offload off
    (ggml_backend_sched_set_op_offload). moeplan emits `-op -1,0` when the plan keeps prefill
    on the CPU and the ubatch is at or above the threshold; llama-bench has no -op.
  * `-op`, `-ngl`, `-ts`, `-dev`, `-sm`, `-mg` are listed by --help only in builds with GPU
    offload; the parser takes them in every build (a CPU-only build ignores -ngl with a
    warning). binaries.py adds them for a CPU-only build's help, with a note.
  * drafting: `-md FNAME --spec-type draft:n_max=N` (or `mtp:n_max=N` for models with MTP
    blocks) now; `-md FNAME --draft N` before the --spec-type rework.
  * no --fit off needed (ik's --fit is opt-in), no --load-mode.
"""
from __future__ import annotations

import re

from moeplan.errors import InputError
from moeplan.launch.common import Command, EmitContext, Launch, Script, require_flags
from moeplan.launch.flags import FlagSet, release_table, target_text
from moeplan.launch.llamacpp import (
    PROMPT,
    bench_check_lines,
    check_kv_types,
    device_notes,
    experts_used_parts,
    gpu_split_parts,
    model_requires,
    ngl_value,
    switch_value,
)
from moeplan.launch.numa import llama_numa_value, numa_notes, numa_prefix
from moeplan.launch.patterns import CPU_BUFFER, checked_expert_patterns, override_args
from moeplan.planner.memory.accounting import kv_layer_bytes
from moeplan.planner.memory.compute_buffer import ik_amb_mib
from moeplan.planner.memory.devices import computed_kv_b_bytes as computed_wkv_b_bytes
from moeplan.planner.memory.devices import load_computed_bytes
from moeplan.planner.model.ggml import row_bytes
from moeplan.planner.model.spec import LayerSpec, ModelSpec
from moeplan.planner.placement import Placement
from moeplan.units import MIB

IK_COMMIT = "8337e4cd3"
IK_RELEASE = f"ik_llama.cpp commit {IK_COMMIT} (2026-08-15, read from its source)"
OP_OFFLOAD_BATCH = 32  # GGML_CUDA_MIN_BATCH_OFFLOAD: offload when ubatch * k >= 32 * n_experts
MLA_MODE = 3
OP_OFFLOAD_OFF = "-1,0"  # -op: every ggml op (id -1), offload off
BENCH_OVERRIDE_FIELD = "override_tensor"

# llama-bench's help lists `-mla <0|1|2>`, written before MLA mode 3; its parser takes any
# integer (string_split<int>) and its own default is 3 since PR #863.
BENCH_HELP_CORRECTIONS = {"-mla": "<0|1|2|3>"}

# Flags of ik_llama.cpp 8337e4cd3 that moeplan uses, with the placeholder its --help prints
# (tests/test_launch_help.py checks them against tests/data/help/ik_llama.cpp-8337e4cd3).
_COMMON = {
    "-m": "FNAME", "-ngl": "N", "-ot": "NAME", "-c": "N", "-fa": "(auto|on|off|0|1)", "-no-fa": "",
    "-ctk": "TYPE", "-ctv": "TYPE", "-t": "N", "-tb": "N", "-b": "N", "-ub": "N", "--numa": "TYPE",
    "--no-mmap": "", "--mlock": "", "-ts": "SPLIT", "-dev": "dev1,dev2", "-nkvo": "", "-no-fmoe": "",
    "-mla": "", "-amb": "", "-rtr": "", "-op": "POLICY", "--override-kv": "KEY=TYPE:VALUE",
}
_SERVER = {**_COMMON, "-np": "N", "-md": "FNAME", "--spec-type": "SPEC[:k=v,...]"}
_CLI = {**_COMMON, "-p": "PROMPT", "-n": "N"}
_BENCH = {
    "-m": "<filename>", "-ngl": "<n>", "-ot": "pattern", "-fa": "<0|1>", "-ctk": "<t>", "-ctv": "<t>",
    "-t": "<n>", "-b": "<n>", "-ub": "<n>", "-mmp": "<0|1>", "-nkvo": "<0|1>", "-fmoe": "<0|1>",
    "-mla": BENCH_HELP_CORRECTIONS["-mla"], "-amb": "<i>", "-rtr": "<0|1>", "-ts": "<ts0/ts1/..>",
    "--numa": "<distribute|isolate|numactl> (default: disabled)",
    "-p": "<n>", "-n": "<n>", "-r": "<n>", "-o": "<csv|json|md|sql>",
}
PROGRAMS = {"server": "llama-server", "once": "llama-cli", "bench": "llama-bench"}

# Flags gpt_params_find_arg (common.cpp) takes at 70c0095e1, 41d6c42b9 and 8337e4cd3 alike
# although --help may not list them: before 2026 the help leaves out -ot, -rtr (it lists only
# --run-time-repack) and -op; a build without GPU offload leaves out the GPU section (-ngl,
# -ts, -sm, -mg, -op). Added to a build's own help (binaries.py), with a note.
PARSER_ONLY = {"-ot": "NAME", "-rtr": "", "-op": "POLICY", "-ngl": "N", "-ts": "SPLIT", "-sm": "SPLIT_MODE",
               "-mg": "i"}


def with_parser_flags(fs: FlagSet, bench: bool = False) -> tuple[FlagSet, tuple[str, ...]]:
    """`fs` of an ik llama-server/llama-cli help plus PARSER_ONLY flags it does not list, and
    the flags added; for llama-bench (`bench`), the help's placeholders that BENCH_HELP_CORRECTIONS
    corrects, and no flag added."""
    from dataclasses import replace

    if bench:
        fixed = {f: v for f, v in BENCH_HELP_CORRECTIONS.items() if fs.has(f)}
        return (replace(fs, flags={**fs.flags, **fixed}) if fixed else fs), ()
    added = tuple(f for f in PARSER_ONLY if not fs.has(f))
    if not added:
        return fs, ()
    return replace(fs, flags={**fs.flags, **{f: PARSER_ONLY[f] for f in added}}), added


def release_flags() -> dict[str, FlagSet]:
    return release_table(IK_RELEASE, {"server": ("llama-server", _SERVER), "once": ("llama-cli", _CLI),
                                      "bench": ("llama-bench", _BENCH)})


def op_offload_min_ubatch(n_experts: int, n_used: int) -> int:
    """Smallest ubatch at which ik_llama.cpp copies CPU experts to the GPU in prefill."""
    return -(-OP_OFFLOAD_BATCH * n_experts // max(1, n_used))


def flash_attn_parts(fs: FlagSet, on: bool) -> list[tuple[str, ...]]:
    """Flash attention as this build spells it: `-fa on|off` (PR #944 on), a bare `-fa` (before
    #863, off by default), or only `-no-fa` (#863 to #944, on by default)."""
    if fs.takes_value("-fa", "on") or fs.takes_value("-fa", "1"):
        return [switch_value(fs, "-fa", on)]
    if fs.has("-fa"):
        return [("-fa",)] if on else []
    if fs.has("-no-fa"):
        return [] if on else [("-no-fa",)]
    if on:  # the build lists neither: -fa is what the plan needs, require_flags names it
        return [("-fa",)]
    return []


def fused_moe_parts(fs: FlagSet) -> list[tuple[str, ...]]:
    """Fused MoE up/gate on: `-fmoe` where it is a switch (before #863), nothing where it is
    the default (only `-no-fmoe` listed), `-fmoe 1` for llama-bench."""
    if fs.takes_value("-fmoe", "1"):
        return [("-fmoe", "1")]
    if fs.has("-fmoe"):
        return [("-fmoe",)]
    return []


def _ik_parts(ctx: EmitContext, fs: FlagSet, bench: bool) -> list[tuple[str, ...]]:
    p = ctx.placement
    parts: list[tuple[str, ...]] = fused_moe_parts(fs)
    if ctx.model.mla:
        parts.append(("-mla", str(MLA_MODE)))
    if p.options.amb is not None:  # priced by compute_buffer.ik_kq_heads
        parts.append(("-amb", str(p.options.amb)))
    rtr = p.options.rtr  # asked for (estimate --rtr): its slower prefill is costed
    if bench:
        parts.append(("-rtr", "1" if rtr else "0"))
        parts.append(("-mmp", "1" if p.load_mode == "mmap" else "0"))
        return parts
    if rtr:
        parts.append(("-rtr",))
    elif p.load_mode != "mmap":
        parts.append(("--no-mmap",))  # not -rtr: its interleaved types lose the converted GEMM
    if p.load_mode == "mlock":
        parts.append(("--mlock",))
    if _needs_op_offload_off(ctx):
        parts.append(("-op", OP_OFFLOAD_OFF))
    return parts


def _needs_op_offload_off(ctx: EmitContext) -> bool:
    p, m = ctx.placement, ctx.model
    if p.op_offload or not p.cpu_moe_layers or not m.n_experts:
        return False
    return p.n_ubatch >= op_offload_min_ubatch(m.n_experts, m.n_experts_used)


# ---- -ts: ik_llama.cpp divides it by bytes, not by blocks -----------------------------------
#
# llm_load_tensors (src/llama.cpp at 8337e4cd3), -sm layer with two or more devices: every block
# (and the output layer) has a size from get_layer_sizes - all of its tensors, the experts that
# -ot keeps on the CPU included, plus its KV cache - and each device one compute reserve
# (the largest block's). With splits = the normalised running sums of -ts and
# total = n_devices * reserve + the sizes of the offloaded blocks, device d takes blocks in order
# while its running sum (starting at one reserve) stays <= splits[d] * total, and one more if
# that overshoots by less than it would fall short ("Setting default device in layer N to d").
# Mainline llama.cpp divides -ts by block count. So for ik, moeplan writes -ts as each device's
# bytes under ik's own sizes: the boundaries then fall where the plan puts them, with half a
# block of slack on each side.


def _ne(shape: tuple[int, ...], i: int) -> int:
    return shape[i] if len(shape) > i else 1


def _ik_block_size(layer: LayerSpec, m: ModelSpec, p: Placement) -> tuple[float, float]:
    """(bytes, compute bytes) of one block as get_layer_sizes counts them."""
    ub, k = p.n_ubatch, max(1, m.n_experts_used)
    if layer.kind == "nextn":  # MTP blocks' tensors are skipped without MTP; their cache is not
        return float(kv_layer_bytes(layer, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, ub)), 0.0
    size = float(sum(t.n_bytes for t in layer.tensors))
    exps = shexp = dense = 0
    norm = False
    mla = {}
    for t in layer.tensors:
        part = t.name.split(".", 2)[-1]
        if re.match(r"ffn_(gate_up|gate|up|down)_exps\.", part):
            exps += _ne(t.shape, 1) * ub * k * 4
        elif re.match(r"ffn_(gate|up|down)_shexp\.", part):
            shexp += _ne(t.shape, 1) * ub * 4
        elif re.match(r"ffn_(gate|up|down)\.", part):
            dense += _ne(t.shape, 1) * ub * 4
        elif re.match(r"(attn_norm|attn_norm_2|attn_output_norm|post_attention_norm|ffn_norm|post_ffw_norm|"
                      r"layer_output_norm)\.", part):
            norm = True
        elif part in ("attn_k_b.weight", "attn_v_b.weight", "attn_kv_b.weight"):
            mla[part.split(".")[0]] = t
    comp = float(max(exps, shexp, dense) + m.n_embd * ub * 4 * (2 if norm else 1))
    if m.mla:
        kb, vb, kvb = mla.get("attn_k_b"), mla.get("attn_v_b"), mla.get("attn_kv_b")
        if kb and vb and not kvb:  # wkv_b to compute from k_b/v_b (mainline files), counted twice
            q = "Q8_0" if kb.ggml_type.upper() not in ("F16", "BF16", "F32") else kb.ggml_type
            size += row_bytes(q, _ne(vb.shape, 0)) * (_ne(vb.shape, 1) + _ne(kb.shape, 1)) * _ne(vb.shape, 2) * 2
        elif kvb:
            size += (0 if kb else kvb.n_bytes / 2) + (0 if vb else kvb.n_bytes / 2)
        if vb and MLA_MODE == 3:  # K*Q of -mla 3, in head groups that -amb bounds
            n_head = _ne(vb.shape, 2)
            f32_mib = 2.0 * _ne(vb.shape, 1) * n_head * p.n_ctx * 4 / MIB
            n_max, amb = n_head, ik_amb_mib(p)  # the plan's -amb or the default (llama.cpp L4137)
            if 0 < amb < f32_mib:
                n_max = next((n_head // i for i in range(2, n_head) if n_head % i == 0 and f32_mib / i <= amb), 1)
            comp = max(comp, 2.0 * _ne(vb.shape, 1) * n_max * p.n_ctx * 4)
    size += kv_layer_bytes(layer, p.n_ctx, p.cache_type_k, p.cache_type_v, p.n_seq, ub)
    return size, comp


def ik_layer_sizes(m: ModelSpec, p: Placement) -> tuple[tuple[float, ...], float, float]:
    """(size of every block, size of the output layer, compute reserve per device) in bytes,
    as ik_llama.cpp's get_layer_sizes computes them to divide -ts."""
    blocks = [_ik_block_size(layer, m, p) for layer in m.layers]
    reserve = max((c for _, c in blocks), default=0.0)
    out_w = sum(t.n_bytes for t in m.globals if t.group == "output") or \
        sum(t.n_bytes for t in m.globals if t.group == "embed")
    logits = m.n_vocab * p.n_ubatch * 4
    return tuple(s for s, _ in blocks), float(out_w + max(logits - reserve, 0)), reserve


def ik_tensor_split(m: ModelSpec, p: Placement, devs: tuple[int, ...], out_dev: int, n_dev: int) -> str:
    """-ts for ik_llama.cpp that puts block i on device devs[i] (-1: the CPU) and the output layer
    on out_dev: each device's bytes under ik's sizes, in MiB."""
    sizes, out, reserve = ik_layer_sizes(m, p)
    w = [reserve] * n_dev
    for i, d in enumerate(devs):
        if d >= 0:
            w[d] += sizes[i]
    if out_dev >= 0:
        w[out_dev] += out
    return ",".join(f"{x / MIB:.4f}".rstrip("0").rstrip(".") for x in w)


def _split_parts(ctx: EmitContext, bench: bool) -> list[tuple[str, ...]]:
    """gpu_split_parts with the -ts written for ik's byte rule (the plan's blocks per device)."""
    from moeplan.planner.memory.devices import assign_blocks, parse_tensor_split

    parts = gpu_split_parts(ctx, bench)
    p = ctx.placement
    if p.n_gpus < 2:
        return parts
    try:
        weights = parse_tensor_split(p.options.tensor_split or ",".join("1" for _ in range(p.n_gpus)), p.n_gpus)
    except ValueError:
        return parts  # device_notes names the bad tensor_split
    devs, out_dev = assign_blocks(len(ctx.model.layers), weights, p.n_gpu_layers)
    ts = ik_tensor_split(ctx.model, p, devs, out_dev, p.n_gpus)
    return [("-ts", ts.replace(",", "/") if bench else ts) if part[0] == "-ts" else part for part in parts]


def _placement_parts(ctx: EmitContext, fs: FlagSet, patterns: tuple[str, ...], bench: bool) -> list[tuple[str, ...]]:
    p = ctx.placement
    parts: list[tuple[str, ...]] = [("-m", ctx.model_path), ("-ngl", ngl_value(ctx))]
    overrides = override_args(patterns, CPU_BUFFER)
    if bench and overrides:
        parts.append(("-ot", ",".join(overrides)))  # ik's llama-bench splits -ot on ','
    elif not bench:
        parts += [("-ot", v) for v in overrides]
    if not bench:
        parts.append(("-c", str(p.n_ctx)))
    parts += flash_attn_parts(fs, p.flash_attn)
    parts += [("-ctk", p.cache_type_k), ("-ctv", p.cache_type_v), ("-t", str(p.n_threads))]
    if not bench:
        parts.append(("-tb", str(p.threads_batch)))
    parts += [("-b", str(p.n_batch)), ("-ub", str(p.n_ubatch))]
    if not p.kv_offload:
        parts.append(("-nkvo", "1") if bench else ("-nkvo",))
    numa = llama_numa_value(p, ctx.os)
    if numa:
        parts.append(("--numa", numa))
    parts += _ik_parts(ctx, fs, bench)
    parts += _split_parts(ctx, bench)
    if p.gpu_expert_cache_bytes:
        parts.append(("--moe-cache-mib", str(p.gpu_expert_cache_bytes // 2**20)))
    if not bench:
        parts += experts_used_parts(ctx)
    return parts


def _op_offload_notes(ctx: EmitContext) -> list[str]:
    p, m = ctx.placement, ctx.model
    if not p.cpu_moe_layers or not m.n_experts:
        return []
    threshold = op_offload_min_ubatch(m.n_experts, m.n_experts_used)
    offloads = p.n_ubatch >= threshold
    if ctx.placement.options.op_offload_min_batch:
        raise InputError("the plan sets GGML_OP_OFFLOAD_MIN_BATCH, which ik_llama.cpp does not read",
                         f"ik_llama.cpp offloads from -ub {threshold} for this model (ubatch*k >= 32*n_experts; "
                         "-cuda offload-batch-size=N changes the 32); emit for llama.cpp instead")
    head = (f"op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from "
            f"-ub {threshold} for this model ({m.n_experts} experts, k={m.n_experts_used}); ")
    if not offloads:
        return [head + f"at -ub {p.n_ubatch} prefill computes the CPU experts on the CPU"]
    if p.op_offload:
        return [head + f"at -ub {p.n_ubatch} prefill copies the used CPU experts to the GPU"]
    return [head + f"the plan keeps prefill on the CPU at -ub {p.n_ubatch}, so launch.sh and complete.sh "
            f"pass -op {OP_OFFLOAD_OFF} (offload off for every op); llama-bench has no -op, so bench.sh "
            "measures prefill with offload"]


def speculative_parts(ctx: EmitContext, fs: FlagSet) -> list[tuple[str, ...]]:
    """-md and --spec-type draft:n_max=N (or mtp:n_max=N for a model with MTP blocks); builds
    before --spec-type: -md and --draft N."""
    p = ctx.placement
    if p.n_draft <= 0:
        return []
    draft = ctx.placement.options.draft_model
    has_nextn = any(layer.kind == "nextn" for layer in ctx.model.layers)
    if fs.has("--spec-type"):
        if draft:
            return [("-md", draft), ("--spec-type", f"draft:n_max={p.n_draft}")]
        if has_nextn:
            return [("--spec-type", f"mtp:n_max={p.n_draft}")]
    elif draft:
        return [("-md", draft), ("--draft", str(p.n_draft))]
    raise InputError(f"the plan drafts {p.n_draft} tokens per step but names no draft model"
                     + (" and this ik_llama.cpp build has no --spec-type mtp" if has_nextn else ""),
                     "ik_llama.cpp drafts with a draft model (-md); re-plan with one or without drafting")


def emit(ctx: EmitContext) -> Launch:
    if ctx.n_nodes > 1:
        raise InputError("ik_llama.cpp launch files are for one machine", "--nodes applies to vllm or sglang")
    check_kv_types(ctx)
    p = ctx.placement
    patterns = checked_expert_patterns(ctx.model, p.cpu_moe_layers)
    notes = _op_offload_notes(ctx) + list(numa_notes(p, ctx.os))
    if p.n_gpus > 1 and p.options.tensor_split:
        notes += device_notes(ctx)
    if p.n_gpus > 1:
        notes.append("-ts is each device's MiB: ik_llama.cpp divides -ts by its own size of every block (all of its "
                     "weights, CPU experts included, plus its KV cache), not by block count as llama.cpp does; these "
                     "values put the plan's blocks on each device")
    if p.load_mode != "mmap" and not p.options.rtr:
        notes.append("--no-mmap, not -rtr: -rtr would repack the CPU experts to row-interleaved types, which "
                     "ik_llama.cpp's prefill multiplies about 3x slower (no int8 GEMM conversion for them)")
    fs_server, fs_once, fs_bench = ctx.flags["server"], ctx.flags["once"], ctx.flags["bench"]
    if ctx.model.mla and not any(".attn_kv_b." in t.name for t in ctx.model.tensors):
        extra_b = sum(computed_wkv_b_bytes(layer) for layer in ctx.model.layers)
        counted = any(load_computed_bytes(layer, p) for layer in ctx.model.layers)
        notes.append(f"this GGUF has no attn_kv_b tensors (as converted by mainline llama.cpp): ik_llama.cpp computes "
                     f"them from attn_k_b/attn_v_b at load and runs -mla {MLA_MODE}; they take {extra_b / MIB:.1f} MiB "
                     "more on the blocks' devices, " + (
                         "counted in the plan's memory (weights_computed)" if counted else
                         "which the plan's VRAM figure (a plan for another backend) does not include"))
    spec = speculative_parts(ctx, fs_server)
    prefix = numa_prefix(p, ctx.os)
    server = Command(parts=((ctx.programs["server"],), *_placement_parts(ctx, fs_server, patterns, False),
                            ("-np", str(p.n_seq)), *spec), prefix=prefix)
    once_tail = [("-no-cnv",)] if fs_once.has("-no-cnv") else []
    once = Command(parts=((ctx.programs["once"],), *_placement_parts(ctx, fs_once, patterns, False),
                          *once_tail, ("-p", PROMPT), ("-n", "32")), prefix=prefix)
    bench = Command(parts=((ctx.programs["bench"],), *_placement_parts(ctx, fs_bench, patterns, True),
                           ("-p", str(max(512, p.n_ubatch))), ("-n", "128"), ("-r", "3"), ("-o", "json")),
                    prefix=prefix)
    for cmd, fs in ((server, fs_server), (once, fs_once), (bench, fs_bench)):
        require_flags(cmd, fs, "ik_llama.cpp")
    expected = ",".join(override_args(patterns, CPU_BUFFER)) or "none"
    if patterns:
        check = bench_check_lines(expected, field=BENCH_OVERRIDE_FIELD, field_required=False)
    else:
        check = ('echo "bench.sh: results in $here/bench.json" >&2',)
    requires = model_requires(ctx)
    target = target_text(fs_server, IK_RELEASE, "no ik_llama.cpp binary found: pass --bin")
    scripts = (
        Script("launch.sh", "ik_llama.cpp llama-server with the plan's placement", server, requires=requires),
        Script("complete.sh", "one short completion with the plan's placement (add --verbose to see "
                              "each tensor's buffer)", once, requires=requires),
        Script("bench.sh", "ik_llama.cpp llama-bench of the plan; fails if it ran without the -ot overrides",
               bench, exec_=False, stdout_to="bench.json", after=check, requires=requires),
    )
    return Launch(backend="ik_llama.cpp", target=target, scripts=scripts, notes=tuple(notes) + ctx.notes,
                  cpu_layers=tuple(p.cpu_moe_layers), patterns=patterns)
