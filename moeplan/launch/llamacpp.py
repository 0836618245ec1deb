"""llama.cpp: llama-server (launch.sh), llama-completion (complete.sh), llama-bench (bench.sh).

Flags are chosen from the program's own `--help` when moeplan can run it, else from
LLAMA_CPP_RELEASE below: the flags of the tree moeplan was written against (common/arg.cpp,
tools/llama-bench/llama-bench.cpp of llama.cpp 0.5.0-dev, commit 0c1e570, 2026-10-01).

Choices and why:
  -ngl <blocks + 1>  llama.cpp counts the output layer, so 17 offloads 16 blocks + output; a
                     number works in llama-server and llama-bench alike (llama-bench has no 'all').
  -ot PATTERN=CPU    the experts of the plan's CPU blocks (patterns.py), checked against the
                     model's tensor names; in llama-bench all overrides go into one -ot joined
                     by ';' (a ',' starts another test group there).
  -fit off           any -ot already stops --fit from moving layers, but saying it keeps the
                     plan exactly what runs on every build that has --fit.
  -lm MODE           mmap | none (no-mmap) | mlock; builds before --load-mode take --no-mmap /
                     --mlock (mlock there is --no-mmap --mlock: pinned anonymous memory).
  -np N              always: llama-server's default is 4 slots ('auto'), the plan says n_seq.
  --no-op-offload    only when the plan keeps CPU experts on the CPU in prefill too.
  GGML_OP_OFFLOAD_MIN_BATCH  only when the plan sets Placement.options.op_offload_min_batch.
"""
from __future__ import annotations

import json
import shlex

from moeplan.errors import InputError
from moeplan.launch.common import Command, EmitContext, Launch, Script, mib, require_flags
from moeplan.launch.flags import FlagSet, release_table, target_text
from moeplan.launch.numa import llama_numa_value, numa_notes, numa_prefix
from moeplan.launch.patterns import CPU_BUFFER, checked_expert_patterns, override_args

LLAMA_CPP_RELEASE = "llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01)"

# What llama-server and llama-completion of LLAMA_CPP_RELEASE print for the flags moeplan
# emits (tests/test_launch_help.py checks this table against the recorded --help output).
_COMMON_FLAGS = {
    "-m": "FNAME", "-ngl": "N", "-ot": "<tensor name pattern>=<buffer type>,...", "-fit": "[on|off]",
    "-c": "N", "-fa": "[on|off|auto]", "-ctk": "TYPE", "-ctv": "TYPE", "-t": "N", "-tb": "N", "-b": "N",
    "-ub": "N", "--no-op-offload": "", "--numa": "TYPE", "-lm": "MODE", "-ts": "N0,N1,N2,...",
    "-dev": "<dev1,dev2,..>", "-nkvo": "", "-np": "N", "--override-kv": "KEY=TYPE:VALUE,...",
}
_SERVER_FLAGS = {**_COMMON_FLAGS, "--spec-type": (
    "none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k,"
    "ngram-map-k4v,ngram-mod,ngram-cache"), "--spec-draft-n-max": "N", "-md": "FNAME"}
_COMPLETION_FLAGS = {**_COMMON_FLAGS, "-no-cnv": "", "-p": "PROMPT", "-n": "N"}
_BENCH_FLAGS = {
    "-m": "<filename>", "-ngl": "<n>", "-ot": "<tensor name pattern>=<buffer type>;...",
    "-fa": "<on|off|auto>", "-ctk": "<t>", "-ctv": "<t>", "-t": "<n>", "-b": "<n>", "-ub": "<n>",
    "-nopo": "<0|1>", "-nkvo": "<0|1>", "--numa": "<distribute|isolate|numactl>",
    "-lm": "<auto|none|mmap|mlock|mmap+mlock|dio> (default: auto)", "-ts": "<ts0/ts1/..>",
    "-dev": "<dev0/dev1/...>", "-p": "<n>", "-n": "<n>", "-d": "<n>", "-r": "<n>",
    "-o": "<csv|json|jsonl|md|sql>",
}


def release_flags() -> dict[str, FlagSet]:
    return release_table(LLAMA_CPP_RELEASE, {"server": ("llama-server", _SERVER_FLAGS),
                                             "once": ("llama-completion", _COMPLETION_FLAGS),
                                             "bench": ("llama-bench", _BENCH_FLAGS)})


PROGRAMS = {"server": "llama-server", "once": "llama-completion", "bench": "llama-bench"}
ONCE_FALLBACK = "llama-cli"  # builds before llama-completion ran one-shot prompts with llama-cli -no-cnv
PROMPT = "The capital of France is"
BENCH_PROMPT_MIN = 512
BENCH_GEN = 128
BENCH_REPS = 3


# ---- flag spellings that differ between builds ----------------------------------------------

def switch_value(fs: FlagSet, flag: str, on: bool) -> tuple[str, ...]:
    """A boolean flag as the program spells it: `-fa on`, `-fa 1` or a bare `-fa`."""
    if fs.takes_value(flag, "on"):
        return (flag, "on" if on else "off")
    if fs.takes_value(flag, "1"):
        return (flag, "1" if on else "0")
    return (flag,) if on else ()


def load_mode_parts(fs: FlagSet, mode: str, bench: bool) -> list[tuple[str, ...]]:
    if fs.has("-lm"):
        return [("-lm", {"mmap": "mmap", "no-mmap": "none", "mlock": "mlock"}[mode])]
    if bench:  # llama-bench before --load-mode: -mmp <0|1>
        return [("-mmp", "1" if mode == "mmap" else "0")]
    by_mode: dict[str, list[tuple[str, ...]]] = {"mmap": [], "no-mmap": [("--no-mmap",)],
                                                 "mlock": [("--no-mmap",), ("--mlock",)]}
    return by_mode[mode]


def ngl_value(ctx: EmitContext) -> str:
    """Every block of the file (NextN blocks included) plus the output layer; 0 for a plan
    without GPU layers (a machine without a GPU, or -ngl 0 on purpose); the plan's
    n_gpu_layers when it asks for a plain layer split."""
    if ctx.placement.n_gpus == 0:
        return "0"
    if ctx.placement.n_gpu_layers is not None:  # a plain layer split asked for (--ngl N)
        return str(ctx.placement.n_gpu_layers)
    return str(len(ctx.model.layers) + 1)


def gpu_split_parts(ctx: EmitContext, bench: bool) -> list[tuple[str, ...]]:
    p = ctx.placement
    parts: list[tuple[str, ...]] = []
    if p.n_gpus > 1:
        ts = ctx.placement.options.tensor_split or ",".join("1" for _ in range(p.n_gpus))
        parts.append(("-ts", ts.replace(",", "/") if bench else ts))
    devices = ctx.placement.options.devices
    if devices:
        parts.append(("-dev", devices.replace(",", "/") if bench else devices))
    return parts


def check_kv_types(ctx: EmitContext) -> None:
    p = ctx.placement
    if p.cache_type_v not in ("f16", "bf16", "f32") and not p.flash_attn:
        raise InputError(f"a {p.cache_type_v} V cache needs flash attention, which the plan switches off",
                         "re-plan with flash attention on or an f16 V cache")


def model_parts(ctx: EmitContext, fs: FlagSet, patterns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Flags llama-server and llama-completion share: model, placement, context, threads."""
    p = ctx.placement
    parts: list[tuple[str, ...]] = [("-m", ctx.model_path), ("-ngl", ngl_value(ctx))]
    parts += [("-ot", v) for v in override_args(patterns, CPU_BUFFER)]
    if fs.has("-fit"):
        parts.append(("-fit", "off"))
    parts.append(("-c", str(p.n_ctx)))
    fa = switch_value(fs, "-fa", p.flash_attn)
    if fa:
        parts.append(fa)
    parts += [("-ctk", p.cache_type_k), ("-ctv", p.cache_type_v),
              ("-t", str(p.n_threads)), ("-tb", str(p.threads_batch)),
              ("-b", str(p.n_batch)), ("-ub", str(p.n_ubatch))]
    if not p.op_offload:
        parts.append(("--no-op-offload",))
    if not p.kv_offload:
        parts.append(("-nkvo",))
    numa = llama_numa_value(p, ctx.os)
    if numa:
        parts.append(("--numa", numa))
    parts += load_mode_parts(fs, p.load_mode, bench=False)
    parts += gpu_split_parts(ctx, bench=False)
    if p.gpu_expert_cache_bytes:
        parts.append(("--moe-cache-mib", str(mib(p.gpu_expert_cache_bytes))))
    parts += experts_used_parts(ctx)
    return parts


def experts_used_parts(ctx: EmitContext) -> list[tuple[str, ...]]:
    """--override-kv ARCH.expert_used_count=int:N when the plan runs fewer (or more) experts per
    token than the model's own k (llama.cpp reads the key LLM_KV_EXPERT_USED_COUNT)."""
    n = ctx.placement.n_experts_used
    if not n or n == ctx.model.n_experts_used:
        return []
    return [("--override-kv", f"{ctx.model.arch}.expert_used_count=int:{n}")]


def env_pairs(ctx: EmitContext) -> tuple[tuple[str, str], ...]:
    v = ctx.placement.options.op_offload_min_batch
    out: tuple[tuple[str, str], ...] = (("GGML_OP_OFFLOAD_MIN_BATCH", v),) if v else ()
    # a ROCm build on an APU's iGPU allocates from the BIOS carve-out with hipMalloc unless
    # told to use managed memory, which reaches the GTT (docs/build.md "Unified Memory")
    if ctx.placement.options.gpu_build == "rocm" and ctx.placement.options.unified_memory and ctx.placement.n_gpus:
        out += (("GGML_CUDA_ENABLE_UNIFIED_MEMORY", "1"),)
    return out


def build_notes(ctx: EmitContext) -> list[str]:
    """Which llama.cpp build the scripts are for, when it is not CUDA (planner/hardware/vendors.py)."""
    build = ctx.placement.options.gpu_build
    if not build or not ctx.placement.n_gpus:
        return []
    gfx = ctx.placement.options.gfx_target
    if build == "rocm":
        out = ["for a ROCm (HIP) build of llama.cpp (cmake -DGGML_HIP=ON"
               + (f" -DGPU_TARGETS={gfx}" if gfx else "") + "): its devices are ROCm0, ROCm1, ... in -dev and "
               "in the logs; a Vulkan build (-DGGML_VULKAN=ON) takes the same flags with Vulkan0, ..."]
        if ctx.placement.options.unified_memory:
            out.append("GGML_CUDA_ENABLE_UNIFIED_MEMORY=1: the iGPU's weights go to managed memory (the GTT) instead "
                       "of the BIOS carve-out")
        return out
    out = ["for a Vulkan build of llama.cpp (cmake -DGGML_VULKAN=ON): its devices are Vulkan0, Vulkan1, ... in -dev "
           "and in the logs; a ROCm build (-DGGML_HIP=ON" + (f" -DGPU_TARGETS={gfx}" if gfx else "")
           + ") names them ROCm0 and needs GGML_CUDA_ENABLE_UNIFIED_MEMORY=1 on an iGPU"]
    if ctx.placement.options.unified_memory:
        out.append("unified memory: Vulkan counts the iGPU's carve-out and GTT as its memory; the plan's GPU "
                   "budget is that GTT (raise it with ttm.pages_limit on the kernel command line)")
    if "BF16" in (ctx.model.quant or "").upper():
        # kyuz0/amd-strix-halo-toolboxes' logs (benchmarks/data, rows kyuz0-strixhalo-*-bf16-*):
        # RADV reports "bf16: 0" on gfx1151, and BF16 files decode 2.4x slower than under ROCm
        out.append("BF16 weights: RADV reports no bfloat16 support on RDNA 3.5 (\"bf16: 0\"); measured on a Ryzen "
                   "AI Max+ 395, BF16 files decode 2.4x slower with Vulkan than with ROCm (GLM-4.7-Flash 9.5 vs "
                   "23.2 tok/s, Qwen3.6-35B-A3B 10.7 vs 26.0): use a ROCm build or a quantized file")
    return out


def speculative_parts(ctx: EmitContext, fs: FlagSet) -> list[tuple[str, ...]]:
    """Drafting flags for llama-server, only when the plan drafts (it does so when predicted
    to help). The kind: Placement.options.spec_type, else a draft model (options.draft_model),
    else the model's own MTP (NextN) blocks."""
    p = ctx.placement
    if p.n_draft <= 0:
        return []
    draft_model = ctx.placement.options.draft_model
    has_nextn = any(layer.kind == "nextn" for layer in ctx.model.layers)
    spec = ctx.placement.options.spec_type or ("draft-simple" if draft_model else "draft-mtp" if has_nextn else "")
    if not spec:
        raise InputError(f"the plan drafts {p.n_draft} tokens per step but names no draft model and "
                         f"{ctx.model.name} has no MTP blocks",
                         "re-plan with a draft model (Placement.options.draft_model) or without drafting")
    parts: list[tuple[str, ...]]
    if fs.has("--spec-type"):
        parts = [("--spec-type", spec), ("--spec-draft-n-max", str(p.n_draft))]
    else:  # builds before the --spec-* rename: a draft model and --draft-max
        if spec != "draft-simple":
            raise InputError(f"{fs.program} ({fs.source}) has no --spec-type, so no {spec} drafting",
                             "give --bin a newer llama.cpp build or re-plan without drafting")
        parts = [("--draft-max", str(p.n_draft))]
    if draft_model:
        parts.append(("-md", draft_model))
    return parts


def bench_parts(ctx: EmitContext, fs: FlagSet, patterns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The llama-bench run that measures the plan: same placement, prompt >= one ubatch."""
    p = ctx.placement
    parts: list[tuple[str, ...]] = [("-m", ctx.model_path), ("-ngl", ngl_value(ctx))]
    if patterns:
        parts.append(("-ot", ";".join(override_args(patterns, CPU_BUFFER))))
    # -fa right after -ot: llama-bench keeps going after an unknown buffer type in -ot and
    # only a later option that checks its error flag (-fa does; -o json clears it) makes it
    # exit 1 instead of running without the override
    parts.append(switch_value(fs, "-fa", p.flash_attn) or ("-fa", "0"))
    parts += [("-ctk", p.cache_type_k), ("-ctv", p.cache_type_v), ("-t", str(p.n_threads)),
              ("-b", str(p.n_batch)), ("-ub", str(p.n_ubatch)),
              ("-nopo", "0" if p.op_offload else "1")]
    if not p.kv_offload:
        parts.append(("-nkvo", "1"))
    numa = llama_numa_value(p, ctx.os)
    if numa:
        parts.append(("--numa", numa))
    parts += load_mode_parts(fs, p.load_mode, bench=True)
    parts += gpu_split_parts(ctx, bench=True)
    if p.gpu_expert_cache_bytes and fs.has("--moe-cache-mib"):
        parts.append(("--moe-cache-mib", str(mib(p.gpu_expert_cache_bytes))))
    parts += [("-p", str(max(BENCH_PROMPT_MIN, p.n_ubatch))), ("-n", str(BENCH_GEN))]
    if ctx.plan.estimate.depth > 0:
        parts.append(("-d", str(ctx.plan.estimate.depth)))
    parts += [("-r", str(BENCH_REPS)), ("-o", "json")]
    return parts


def bench_expected(patterns: tuple[str, ...]) -> str:
    """What llama-bench reports in `tensor_buft_overrides` when it ran with the plan's -ot."""
    return ";".join(override_args(patterns, CPU_BUFFER)) or "none"


def bench_check_lines(expected: str, out_name: str = "bench.json", field: str = "tensor_buft_overrides",
                      field_required: bool = True) -> tuple[str, ...]:
    """Shell lines that fail bench.sh when llama-bench dropped the overrides: with an unknown
    buffer type it prints an error, runs without them and still exits 0.

    `field`: the JSON field that reports them (ik_llama.cpp's llama-bench: `override_tensor`).
    `field_required=False`: a JSON without the field only prints a warning (older ik builds do
    not report it; they stop on a bad -ot instead)."""
    line = f'"{field}": ' + json.dumps(expected)
    lines = [
        f"expected={shlex.quote(line)}",
        f'n_tests=$(grep -c \'"{field}":\' "$here/{out_name}" || true)',
        f'n_ok=$(grep -cF -- "$expected" "$here/{out_name}" || true)',
    ]
    if field_required:
        lines.append('if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then')
    else:
        lines += ['if [ "$n_tests" -eq 0 ]; then',
                  f'  echo "bench.sh: this llama-bench does not report {field}; the -ot overrides are unchecked" >&2',
                  'elif [ "$n_ok" -ne "$n_tests" ]; then']
    lines += [
        f'  echo "bench.sh: llama-bench did not run with the plan\'s -ot overrides; '
        f'see {field} in $here/{out_name}" >&2',
        "  exit 1",
        "fi",
        f'echo "bench.sh: results in $here/{out_name}" >&2',
    ]
    return tuple(lines)


def _notes(ctx: EmitContext, fs: FlagSet, patterns: tuple[str, ...]) -> list[str]:
    p = ctx.placement
    notes = list(numa_notes(p, ctx.os))
    notes += build_notes(ctx)
    if not fs.has("-fit"):
        notes.append(f"{fs.program} has no --fit, so nothing moves layers behind the plan's back")
    if patterns and p.load_mode == "mmap":
        notes.append("the CPU experts stay in the page cache (mmap): llama.cpp will suggest "
                     "--load-mode none; the plan chose mmap and counts those pages in its RAM figure")
    if p.n_gpus > 1 and not ctx.placement.options.tensor_split:
        notes.append(f"-ts splits the blocks evenly over {p.n_gpus} GPUs; CPU-expert blocks take less "
                     "VRAM, so check nvidia-smi after loading")
    elif p.n_gpus > 1:
        notes += device_notes(ctx)
    if experts_used_parts(ctx):
        notes.append(f"the plan runs {p.n_experts_used} experts per token instead of the model's "
                     f"{ctx.model.n_experts_used} (--override-kv); llama-bench cannot override it, so bench.sh "
                     "measures the model's own k")
    if p.threads_batch != p.n_threads:
        notes.append(f"llama-bench has a single -t: bench.sh runs prefill with -t {p.n_threads}, "
                     f"not the plan's -tb {p.threads_batch}")
    if p.n_draft > 0:
        notes.append(f"speculative decoding drafts {p.n_draft} tokens per step (llama-server only; "
                     "complete.sh and bench.sh measure plain decoding)")
    return notes


def emit(ctx: EmitContext) -> Launch:
    if ctx.n_nodes > 1:
        raise InputError("llama.cpp launch files are for one machine",
                         "--nodes applies to --backend vllm or sglang")
    check_kv_types(ctx)
    p = ctx.placement
    # with no GPU layers every weight is on the CPU already: no override to write
    patterns = checked_expert_patterns(ctx.model, p.cpu_moe_layers) if p.n_gpus else ()
    fs_server, fs_once, fs_bench = ctx.flags["server"], ctx.flags["once"], ctx.flags["bench"]
    env = env_pairs(ctx)
    prefix = numa_prefix(p, ctx.os)

    server = Command(parts=((ctx.programs["server"],), *model_parts(ctx, fs_server, patterns),
                            ("-np", str(p.n_seq)),
                            *speculative_parts(ctx, fs_server)),
                     env=env, prefix=prefix)
    once_tail: list[tuple[str, ...]] = []
    if fs_once.has("-no-cnv"):
        once_tail.append(("-no-cnv",))
    once_tail += [("-p", PROMPT), ("-n", "32")]
    once = Command(parts=((ctx.programs["once"],), *model_parts(ctx, fs_once, patterns), *once_tail),
                   env=env, prefix=prefix)
    bench = Command(parts=((ctx.programs["bench"],), *bench_parts(ctx, fs_bench, patterns)),
                    env=env, prefix=prefix)
    for cmd, fs in ((server, fs_server), (once, fs_once), (bench, fs_bench)):
        require_flags(cmd, fs, "llama.cpp")

    expected = bench_expected(patterns)
    requires = model_requires(ctx)
    scripts = (
        Script("launch.sh", "llama-server with the plan's placement", server, requires=requires),
        Script("complete.sh", "one short completion with the plan's placement (add --verbose to see "
                              "each tensor's buffer)", once, requires=requires),
        Script("bench.sh", "llama-bench of the plan; fails if llama-bench dropped the -ot overrides",
               bench, exec_=False, stdout_to="bench.json", after=bench_check_lines(expected),
               requires=requires),
    )
    return Launch(backend="llama.cpp", scripts=scripts,
                  target=target_text(fs_server, LLAMA_CPP_RELEASE,
                                     "no llama.cpp binary found: pass --bin to check your build"),
                  notes=tuple(_notes(ctx, fs_server, patterns)) + ctx.notes,
                  cpu_layers=tuple(p.cpu_moe_layers), patterns=patterns, bench_overrides=expected)


def device_notes(ctx: EmitContext) -> list[str]:
    """What each device holds under the plan's -ts, computed with llama.cpp's own rule (the
    blocks by the cumulative split, the output layer on the last device: planner/memory/
    devices.py); raises when the -ts does not give every block a GPU."""
    from moeplan.planner.memory.devices import assign_blocks, parse_tensor_split

    p = ctx.placement
    try:
        weights = parse_tensor_split(ctx.placement.options.tensor_split, p.n_gpus)
    except ValueError:
        raise InputError(f"the plan's tensor_split {ctx.placement.options.tensor_split!r} is not a list of at most "
                         f"{p.n_gpus} non-negative numbers", "re-plan with `moeplan tune`") from None
    devs, out_dev = assign_blocks(len(ctx.model.layers), weights, p.n_gpu_layers)
    cpu = set(p.cpu_moe_layers)
    names = [d.strip() for d in (ctx.placement.options.devices or "").split(",") if d.strip()]
    notes = []
    for d in range(p.n_gpus):
        blocks = [ctx.model.layers[i].index for i, dv in enumerate(devs) if dv == d]
        gpu_exp = [b for b in blocks if ctx.model.layers[b].kind == "moe" and b not in cpu]
        name = names[d] if d < len(names) else f"GPU {d}"
        what = (f"blocks {blocks[0]}-{blocks[-1]}" if blocks else "no blocks") + \
            (f", experts of {len(gpu_exp)} of them" if blocks else "") + (", the output layer" if out_dev == d else "")
        notes.append(f"-ts {ctx.placement.options.tensor_split}: {name} holds {what}")
    return notes


def model_requires(ctx: EmitContext) -> tuple[tuple[str, str], ...]:
    name = getattr(ctx.model_path, "var_name", "")
    if not name:
        return ()
    return ((name, f"the GGUF file of {ctx.model.name} {ctx.model.quant} (first shard of a split model)"),)
