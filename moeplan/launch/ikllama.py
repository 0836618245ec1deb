"""ik_llama.cpp: its llama-server (launch.sh), llama-cli (complete.sh), llama-bench (bench.sh).

moeplan could not read ik_llama.cpp's source where it was written, so without a binary the
flags come from IK_RELEASE below, the spellings documented in ikawrakow/ik_llama.cpp's README
and the model guides it links (2025): -ot, -fmoe (fused MoE up/gate), -mla 3 (MLA attention
for DeepSeek-like models, with -fa), -amb 512 (attention compute buffer cap in MiB), -rtr
(run-time repack of CPU tensors; it turns mmap off), --no-mmap, --mlock. With --bin (or an
ik build on PATH) its own `--help` decides, as for llama.cpp.

What differs from mainline:
  * -ncmoe N in ik_llama.cpp keeps the experts of the *last* N MoE layers on the CPU; moeplan
    never emits it and writes explicit -ot patterns instead, so the layers are the plan's.
  * op offload: ik copies CPU experts to the GPU in prefill only when
    ubatch * k >= 32 * n_experts (k = experts used per token). With DeepSeek (256 experts,
    k = 8) that is -ub >= 1024; below it the CPU computes those experts in prefill too.
  * no --fit and no --load-mode: the load mode is --no-mmap / --mlock, or -rtr.
"""
from __future__ import annotations

from moeplan.errors import InputError
from moeplan.launch.common import Command, EmitContext, Launch, Script, require_flags
from moeplan.launch.flags import FlagSet, release_table, target_text
from moeplan.launch.llamacpp import (PROMPT, check_kv_types, device_notes, experts_used_parts, gpu_split_parts, model_requires,
                                     ngl_value, switch_value)
from moeplan.launch.numa import llama_numa_value, numa_notes, numa_prefix
from moeplan.launch.patterns import CPU_BUFFER, checked_expert_patterns, override_args

IK_RELEASE = "ik_llama.cpp main as documented in its README (2025)"
OP_OFFLOAD_BATCH = 32  # ik: offload when ubatch * k >= 32 * n_experts
AMB_MIB = 512  # -amb: the value ik's DeepSeek guides use

_COMMON = {
    "-m": "FNAME", "-ngl": "N", "-ot": "<tensor name pattern>=<buffer type>,...", "-c": "N", "-fa": "",
    "-ctk": "TYPE", "-ctv": "TYPE", "-t": "N", "-tb": "N", "-b": "N", "-ub": "N", "--numa": "TYPE",
    "--no-mmap": "", "--mlock": "", "-ts": "SPLIT", "-nkvo": "", "-fmoe": "", "-mla": "N", "-amb": "N",
    "-rtr": "", "--override-kv": "KEY=TYPE:VALUE,...",
}
_SERVER = {**_COMMON, "-np": "N", "-md": "FNAME", "--draft": "N"}
_CLI = {**_COMMON, "-p": "PROMPT", "-n": "N"}
_BENCH = {
    "-m": "<filename>", "-ngl": "<n>", "-ot": "<tensor name pattern>=<buffer type>", "-fa": "<0|1>",
    "-ctk": "<t>", "-ctv": "<t>", "-t": "<n>", "-b": "<n>", "-ub": "<n>", "-mmp": "<0|1>", "-nkvo": "<0|1>",
    "-fmoe": "<0|1>", "-mla": "<0|1|2|3>", "-amb": "<n>", "-rtr": "<0|1>", "-ts": "<ts0/ts1/..>",
    "--numa": "<distribute|isolate|numactl>", "-p": "<n>", "-n": "<n>", "-r": "<n>", "-o": "<csv|json|md|sql>",
}
PROGRAMS = {"server": "llama-server", "once": "llama-cli", "bench": "llama-bench"}


def release_flags() -> dict[str, FlagSet]:
    return release_table(IK_RELEASE, {"server": ("llama-server", _SERVER), "once": ("llama-cli", _CLI),
                                      "bench": ("llama-bench", _BENCH)})


def op_offload_min_ubatch(n_experts: int, n_used: int) -> int:
    """Smallest ubatch at which ik_llama.cpp copies CPU experts to the GPU in prefill."""
    return -(-OP_OFFLOAD_BATCH * n_experts // max(1, n_used))


def _ik_parts(ctx: EmitContext, fs: FlagSet, bench: bool) -> list[tuple[str, ...]]:
    p = ctx.placement
    parts: list[tuple[str, ...]] = []
    if bench:
        parts.append(("-fmoe", "1"))
        if ctx.model.mla:
            parts += [("-mla", "3"), ("-amb", str(AMB_MIB))]
        parts.append(("-rtr", "0" if p.load_mode == "mmap" else "1"))
        parts.append(("-mmp", "1" if p.load_mode == "mmap" else "0"))
        return parts
    parts.append(("-fmoe",))
    if ctx.model.mla:
        parts += [("-mla", "3"), ("-amb", str(AMB_MIB))]
    if p.load_mode != "mmap":
        parts.append(("-rtr",))  # repacks CPU tensors at load and implies --no-mmap
    if p.load_mode == "mlock":
        parts.append(("--mlock",))
    return parts


def _placement_parts(ctx: EmitContext, fs: FlagSet, patterns: tuple[str, ...], bench: bool) -> list[tuple[str, ...]]:
    p = ctx.placement
    parts: list[tuple[str, ...]] = [("-m", ctx.model_path), ("-ngl", ngl_value(ctx))]
    overrides = override_args(patterns, CPU_BUFFER)
    if bench and overrides:
        parts.append(("-ot", ";".join(overrides)))
    elif not bench:
        parts += [("-ot", v) for v in overrides]
    if not bench:
        parts.append(("-c", str(p.n_ctx)))
    fa = switch_value(fs, "-fa", p.flash_attn)
    if fa:
        parts.append(fa)
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
    parts += gpu_split_parts(ctx, bench)
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
    if not p.op_offload and offloads:
        raise InputError(
            f"the plan keeps CPU experts on the CPU in prefill, but ik_llama.cpp copies them to the GPU "
            f"at -ub {p.n_ubatch} (it does from ubatch*k >= 32*n_experts, here -ub >= {threshold})",
            f"re-plan with --ubatch below {threshold}, or emit for --backend llama.cpp (--no-op-offload)")
    if ctx.extra("op_offload_min_batch"):
        raise InputError("the plan sets GGML_OP_OFFLOAD_MIN_BATCH, which ik_llama.cpp does not read",
                         f"ik_llama.cpp offloads from -ub {threshold} for this model; emit for llama.cpp instead")
    state = "copies the used CPU experts to the GPU" if offloads else "computes the CPU experts on the CPU"
    return [f"op offload: ik_llama.cpp offloads when ubatch*k >= 32*n_experts, i.e. from -ub {threshold} "
            f"for this model ({m.n_experts} experts, k={m.n_experts_used}); at -ub {p.n_ubatch} prefill "
            f"{state}"]


def emit(ctx: EmitContext) -> Launch:
    if ctx.n_nodes > 1:
        raise InputError("ik_llama.cpp launch files are for one machine", "--nodes applies to vllm or sglang")
    check_kv_types(ctx)
    p = ctx.placement
    patterns = checked_expert_patterns(ctx.model, p.cpu_moe_layers)
    notes = _op_offload_notes(ctx) + list(numa_notes(p, ctx.os))
    if p.n_gpus > 1 and ctx.extra("tensor_split"):
        notes += device_notes(ctx)
    if p.load_mode != "mmap":
        notes.append("-rtr repacks the CPU expert tensors at load time and turns mmap off")
    fs_server, fs_once, fs_bench = ctx.flags["server"], ctx.flags["once"], ctx.flags["bench"]
    spec: list[tuple[str, ...]] = []
    if p.n_draft > 0:
        draft = ctx.extra("draft_model")
        if not draft:
            raise InputError(f"the plan drafts {p.n_draft} tokens per step but names no draft model",
                             "ik_llama.cpp drafts with a draft model (-md); re-plan with one or without drafting")
        spec = [("-md", draft), ("--draft", str(p.n_draft))]
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
    notes.append("bench.sh does not check tensor_buft_overrides (ik's llama-bench JSON may not report "
                 "it): run complete.sh --verbose to see where each expert tensor went")
    requires = model_requires(ctx)
    target = target_text(fs_server, IK_RELEASE, "no ik_llama.cpp binary found: pass --bin")
    scripts = (
        Script("launch.sh", "ik_llama.cpp llama-server with the plan's placement", server, requires=requires),
        Script("complete.sh", "one short completion with the plan's placement", once, requires=requires),
        Script("bench.sh", "ik_llama.cpp llama-bench of the plan", bench, exec_=False,
               stdout_to="bench.json", requires=requires),
    )
    return Launch(backend="ik_llama.cpp", target=target, scripts=scripts, notes=tuple(notes) + ctx.notes,
                  cpu_layers=tuple(p.cpu_moe_layers), patterns=patterns)
