"""Write llama.cpp logs of a GPU run from llama.cpp's own format strings (0c1e570), for tests.

No GPU run is recorded here: the figures are moeplan's prediction for the placement plus stated
constants that only a GPU shows (CUDA context, pool high-water, compute correction), so a test
knows the truth it should recover. Every line follows the printf format cited next to it;
the files this writes under tests/data/logs/ start with a '# SYNTHETIC' header saying so.

    python tests/cuda_logs.py   # rewrites tests/data/logs/cuda-*.log
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory, kv_cache_bytes
from moeplan.planner.memory.compute_buffer import reserve_shape
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement

MIB = 1024 * 1024
DATA = Path(__file__).parent / "data" / "logs"


@dataclass(frozen=True)
class GpuTruth:
    """What the synthetic GPU shows beyond moeplan's prediction."""

    context_mib: float = 412.0  # unaccounted at ubatch 0, beyond the derived pool
    pool_mib_per_ubatch: float = 0.25  # pool high-water per ubatch token beyond the derived pool
    compute_extra_mib: float = 0.0  # added to the GPU compute buffer
    total_mib: int = 24080  # RTX 4090 as cudaMemGetInfo reports it
    other_mib: int = 0  # other processes on the GPU


@dataclass(frozen=True)
class GpuRun:
    model: ModelSpec
    placement: Placement
    truth: GpuTruth = field(default_factory=GpuTruth)
    program: str = "llama-server"
    model_path: str = "/models/Qwen3-30B-A3B-Q4_K_M.gguf"
    device: str = "CUDA0"
    description: str = "NVIDIA GeForce RTX 4090"
    n_cpus: int = 32
    prompt_tokens: int = 0
    prompt_tok_s: float = 0.0
    gen_tokens: int = 0
    gen_tok_s: float = 0.0
    verbose: bool = True
    echo_args: bool = True


def _ot(p: Placement) -> str:
    return "^blk\\.(" + "|".join(str(i) for i in p.cpu_moe_layers) + ")\\.ffn_(up|down|gate)_exps\\.weight$=CPU"


def args_of(r: GpuRun) -> list[str]:
    p = r.placement
    a = [r.program, "-m", r.model_path, "-ngl", "99", "-c", str(p.n_ctx), "-ctk", p.cache_type_k, "-ctv",
         p.cache_type_v, "-fa", "on" if p.flash_attn else "off", "-ub", str(p.n_ubatch), "-b", str(p.n_batch),
         "-t", str(p.n_threads)]
    if p.cpu_moe_layers:
        a += ["-ot", _ot(p)]
    if r.verbose:
        a.append("-v")
    return a


def breakdown_lines(rows: list[list[str]], func: str = "common_memory_breakdown_print") -> list[str]:
    """common/fit.cpp:921-923 templates, padded as fit.cpp:1057-1065 does (column 1 left, others right)."""
    header = ["memory breakdown [MiB]", "total", "free", "self", "model", "context", "compute", "unaccounted"]
    table = [header] + rows
    for j in range(len(header)):
        w = max(len(r[j]) for r in table)
        for r in table:
            r[j] = r[j].ljust(w) if j == 0 else r[j].rjust(w)
    out = []
    for i, r in enumerate(table):
        if i == 0:
            out.append(f"{func}: | {r[0]} | {r[1]}   {r[2]}    {r[3]}   {r[4]}   {r[5]}   {r[6]}    {r[7]} |")
        elif r[1].strip():
            out.append(f"{func}: | {r[0]} | {r[1]} = {r[2]} + ({r[3]} = {r[4]} + {r[5]} + {r[6]}) + {r[7]} |")
        else:
            out.append(f"{func}: | {r[0]} | {r[1]}   {r[2]}    {r[3]} = {r[4]} + {r[5]} + {r[6]}    {r[7]} |")
    return out


CUDA = MemoryConstants(gpu_build="cuda")  # the synthetic runs are a CUDA build's (memory/cuda_runtime.py)


def unaccounted_bytes(r: GpuRun) -> int:
    """context + the pool high-water moeplan derives for a CUDA build + the stated residual per
    ubatch token + other processes."""
    n_ub = reserve_shape(r.placement).n_tokens
    pool = estimate_memory(r.model, r.placement, CUDA).get("cuda_pool")
    return round((r.truth.context_mib + r.truth.pool_mib_per_ubatch * n_ub + r.truth.other_mib) * MIB) + pool


def render(r: GpuRun) -> str:
    """The log text of one single-GPU run."""
    m, p, t = r.model, r.placement, r.truth
    mem = estimate_memory(m, p, CUDA)
    g = {i.name: i.n_bytes for i in mem.items}
    gpu_model = g["weights_dense"] + g["weights_experts"]
    host_model = g["weights_embed"] + g["weights_experts_cpu"]
    kv = g["kv_cache"]
    compute = g["compute"] + round(t.compute_extra_mib * MIB)
    compute_host = g["compute_cpu"]
    output = g["output"]
    lines = []
    if r.echo_args:
        lines.append("+ " + " ".join(a if " " not in a and "(" not in a else f"'{a}'" for a in args_of(r)))
    lines.append("ggml_cuda_init: found 1 CUDA devices (Total VRAM: %d MiB):" % t.total_mib)
    lines.append(f"  Device 0: {r.description}, compute capability 8.9, VMM: yes, VRAM: {t.total_mib} MiB")
    free_before = t.total_mib - t.other_mib - int(t.context_mib)
    # src/llama.cpp:306
    lines.append("llama_model_load_from_file_impl: using device %s (%s) (%s) - %d MiB free"
                 % (r.device, r.description, "0000:01:00.0", free_before))
    # src/llama-model-loader.cpp:722
    lines.append("llama_model_loader: loaded meta data with %d key-value pairs and %d tensors from %s (version %s)"
                 % (44, len(m.tensors), r.model_path, "GGUF V3 (latest)"))
    for k, v in (("arch", m.arch), ("n_layer", str(m.n_layers)), ("n_expert", str(m.n_experts)),
                 ("n_expert_used", str(m.n_experts_used)), ("general.name", m.name)):
        lines.append("print_info: %-21s = %s" % (k, v))  # src/llama-model.cpp:2067-2169
    if r.verbose:
        for layer in m.trunk_layers:
            lines.append("load_tensors: layer %3d assigned to device %s, is_swa = %d" % (layer.index, r.device, 0))
        lines.append("load_tensors: layer %3d assigned to device %s, is_swa = %d" % (m.n_layers, r.device, 0))
        for layer in m.moe_layers:
            if layer.index in p.cpu_moe_layers:
                for x in layer.tensors:
                    if x.group == "experts":  # src/llama-model-loader.cpp:1253
                        lines.append("tensor %s (%d MiB %s) buffer type overridden to %s"
                                     % (x.name, x.n_bytes // MIB, x.ggml_type.lower(), "CPU"))
    lines.append("load_tensors: offloading output layer to GPU")
    lines.append("load_tensors: offloading %d repeating layers to GPU" % m.n_layers)
    lines.append("load_tensors: offloaded %d/%d layers to GPU" % (m.n_layers + 1, m.n_layers + 1))  # :1924
    for name, b in (("CUDA0", gpu_model), ("CPU_Mapped", host_model)):
        lines.append("load_tensors: %12s model buffer size = %8.2f MiB" % (name, b / MIB))  # :1930
    lines.append("." * 60)
    for k, v in (("n_seq_max", p.n_seq), ("n_ctx", p.n_ctx), ("n_ctx_seq", p.n_ctx), ("n_batch", p.n_batch),
                 ("n_ubatch", p.n_ubatch), ("causal_attn", 1), ("flash_attn", "enabled" if p.flash_attn else "disabled"),
                 ("kv_unified", "true" if p.kv_unified else "false"), ("n_outputs_max", p.n_outputs_max or p.n_batch)):
        lines.append("llama_context: %-21s = %s" % (k, v))  # src/llama-context.cpp:308-315
    lines.append("llama_context: %10s  output buffer size = %8.2f MiB" % ("CUDA_Host", output / MIB))  # :381
    lines.append("llama_kv_cache: %10s KV buffer size = %8.2f MiB" % (r.device, kv / MIB))  # llama-kv-cache.cpp:291
    half = kv_cache_bytes(m, p.n_ctx, p.cache_type_k, p.cache_type_v) / 2 / MIB
    lines.append("llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s): "
                 "%7.2f MiB" % (kv / MIB, p.n_ctx, m.n_layers, 1, 1, p.cache_type_k, half, p.cache_type_v, half))
    lines.append("sched_reserve: %10s compute buffer size = %8.2f MiB" % (r.device, compute / MIB))  # :740
    lines.append("sched_reserve: %10s compute buffer size = %8.2f MiB" % ("CUDA_Host", compute_host / MIB))
    lines.append("sched_reserve: graph nodes  = 2887")
    # common/common.cpp:423
    lines.append("system_info: n_threads = %d (n_threads_batch = %d) / %d | CUDA : ARCHS = 890 | USE_GRAPHS = 1 | "
                 "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | REPACK = 1 |"
                 % (p.n_threads, p.threads_batch, r.n_cpus))
    lines.append("srv          init: initializing slots, n_slots = 1")
    if r.prompt_tokens:  # tools/server/server-context.cpp:613-621 through SLT_INF (server-common.h:28)
        pre = "slot print_timing: id  0 | task 0 | "
        lines.append(pre + "prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)"
                     % (r.prompt_tokens / r.prompt_tok_s * 1e3, r.prompt_tokens, 1e3 / r.prompt_tok_s, r.prompt_tok_s))
        lines.append(pre + "       eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)"
                     % (r.gen_tokens / r.gen_tok_s * 1e3, r.gen_tokens, 1e3 / r.gen_tok_s, r.gen_tok_s))
        lines.append(pre + "      total time = %10.2f ms / %5d tokens"
                     % (r.prompt_tokens / r.prompt_tok_s * 1e3 + r.gen_tokens / r.gen_tok_s * 1e3,
                        r.prompt_tokens + r.gen_tokens))
    # common/fit.cpp:906-1066: integer MiB, unaccounted = total - free - self
    self_b = gpu_model + kv + compute
    unacc = unaccounted_bytes(r)
    total_b = t.total_mib * MIB
    free_b = total_b - self_b - unacc
    rows = [[f"  - {r.device} ({r.description.removeprefix('NVIDIA ').removeprefix('GeForce ')})",
             str(total_b // MIB), str(free_b // MIB), str(self_b // MIB), str(gpu_model // MIB), str(kv // MIB),
             str(compute // MIB), str((total_b - free_b - self_b) // MIB)],
            ["  - Host", "", "", str((host_model + compute_host) // MIB), str(host_model // MIB), "0",
             str(compute_host // MIB), ""]]
    lines += breakdown_lines(rows)
    return "\n".join(lines) + "\n"


def header(text: str, what: str) -> str:
    return ("# SYNTHETIC (not a recorded run): written by tests/cuda_logs.py from llama.cpp 0c1e570's format\n"
            f"# strings; {what}\n"
            "# DERIVED FROM MOEPLAN'S OWN PREDICTION: `check` agreeing with this log proves only that it reads\n"
            "# the format and recovers the stated constants, never that moeplan's VRAM figures are right\n") + text


def fixture_runs() -> dict[str, GpuRun]:
    from moeplan.probes.models import resolve_model

    m = resolve_model("qwen3-30b-a3b", quant="Q4_K_M")
    base = Placement(cpu_moe_layers=tuple(range(0, 12)), n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0",
                     n_ubatch=512, n_batch=2048, n_threads=16, n_outputs_max=1)
    return {
        "cuda-llama-server-qwen3moe.log": GpuRun(m, base, prompt_tokens=1843, prompt_tok_s=612.4, gen_tokens=256,
                                                 gen_tok_s=38.7),
        "cuda-llama-server-qwen3moe-quiet.log": GpuRun(m, base.with_(n_ubatch=1024), verbose=False, echo_args=False,
                                                       prompt_tokens=4096, prompt_tok_s=905.0, gen_tokens=128,
                                                       gen_tok_s=36.1),
    }


def main() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for name, r in fixture_runs().items():
        what = (f"figures = moeplan's prediction for {r.model.name} {r.model.quant} + a GPU showing "
                f"context {r.truth.context_mib} MiB + the pool moeplan derives for a CUDA build + "
                f"{r.truth.pool_mib_per_ubatch} MiB per ubatch token; "
                f"speeds chosen ({r.prompt_tok_s} / {r.gen_tok_s} tok/s)")
        text = header(render(r), what)
        if name.endswith("-quiet.log"):
            text = text.replace("\n", "\r\n")  # Windows line ends
        (DATA / name).write_bytes(text.encode())


if __name__ == "__main__":
    main()
