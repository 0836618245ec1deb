"""How close the executor's decode gets to the memory roofline on this machine.

    python benchmarks/executor_roofline.py [--dtype auto,fp16,fp32,bf16] [--threads 1,2] [--rounds 3]
                                           [--tokens 12] [--layers 2] [--device cpu|cuda]
                                           [--clock thread] [--emulate-avx2]

`auto` is the dtype the executor picks on this CPU (moeplan/executor/native.py). --emulate-avx2
reruns the benchmark with torch's kernels held to AVX2 (ATEN_CPU_CAPABILITY=avx2) and oneDNN and
MKL too (ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2): an AVX2 host without AVX-512 or
native bf16, as far as the executor's kernels can tell; the header prints the capability torch
reports, so a run shows whether it took effect.

Model: Qwen3-30B-A3B's shapes (48 blocks, n_embd 2048, 128 experts of n_ff 768, top-8, GQA
32/4 x 128), every routed expert on the CPU (`--all-cpu-moe`), uniform routing, `--layers`
blocks run and scaled to 48 (layer sampling; each block keeps all 128 experts, 1.2 GB in bf16,
far more than the last-level cache). Without a GPU the "GPU" part (attention, router, head)
also runs on the CPU, so every byte a token touches is read from host DRAM.

Roofline: t_roof = (bytes read per decode token) / (DRAM read bandwidth), with the bandwidth
measured in the same run by `moeplan probe`'s own DRAM read job (moeplan/probes/dram.py:
numpy uint64 max() over arrays of 4x the last-level cache, at least 1 GiB, one thread pinned
per CPU, first-touch placement; best of 5 passes), or with `--clock thread` by the same kernel
timed in the reading thread's CPU time. The
figure printed is t_roof / t_measured, for the whole token and for the CPU-expert tier alone
(its bytes / its time / bandwidth). Rounds alternate bandwidth and decode measurements and the
best of each is kept, because this machine may be shared. Target: >= 50 % on the CPU.

With --device cuda: transfer mode (every used expert uploaded from pinned host memory, what
llama.cpp does in prefill with op-offload) against the host-to-device rate of a pinned 1 GiB
copy measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

from moeplan.executor.build import ExecOptions, read_llc_bytes
from moeplan.executor.routing import parse_routing
from moeplan.executor.run import RunSpec, run_bench
from moeplan.planner.model.build import build_model_spec
from moeplan.planner.model.ggml import TYPE_SIZES
from moeplan.planner.model.spec import make_tensor
from moeplan.planner.placement import Placement

GIB = 1024**3


def qwen3_30b_a3b_shapes(expert_type: str = "BF16"):
    """A ModelSpec with Qwen3-30B-A3B's tensor index (config.json of Qwen/Qwen3-30B-A3B:
    hidden 2048, 48 layers, 128 experts, 8 used, moe_intermediate 768, 32 heads, 4 kv heads,
    head_dim 128, vocab 151936), all tensors of `expert_type` but norms (F32)."""
    return qwen3moe_shapes(48, 2048, 768, 128, 8, 32, 4, 128, 151936, expert_type, "Qwen3-30B-A3B shapes", 40960)


def qwen3moe_shapes(n_layer: int, d: int, f: int, n_exp: int, k: int, hq: int, hkv: int, dh: int, vocab: int,
                    expert_type: str, name: str, ctx: int):
    """A qwen3moe ModelSpec of these shapes, all tensors of `expert_type` but norms and router (F32)."""

    def t(name, shape, typ=expert_type):
        n = 1
        for s in shape:
            n *= s
        b, sz = TYPE_SIZES[typ]
        return make_tensor(name, shape, typ, n // b * sz)

    ts = [t("token_embd.weight", (d, vocab)), t("output.weight", (d, vocab)), t("output_norm.weight", (d,), "F32")]
    for i in range(n_layer):
        p = f"blk.{i}."
        ts += [t(p + "attn_norm.weight", (d,), "F32"), t(p + "ffn_norm.weight", (d,), "F32"),
               t(p + "attn_q.weight", (d, hq * dh)), t(p + "attn_k.weight", (d, hkv * dh)),
               t(p + "attn_v.weight", (d, hkv * dh)), t(p + "attn_output.weight", (hq * dh, d)),
               t(p + "attn_q_norm.weight", (dh,), "F32"), t(p + "attn_k_norm.weight", (dh,), "F32"),
               t(p + "ffn_gate_inp.weight", (d, n_exp), "F32"),
               t(p + "ffn_gate_exps.weight", (d, f, n_exp)), t(p + "ffn_up_exps.weight", (d, f, n_exp)),
               t(p + "ffn_down_exps.weight", (f, d, n_exp))]
    hp = {"block_count": n_layer, "embedding_length": d, "attention.head_count": hq, "attention.head_count_kv": hkv,
          "attention.key_length": dh, "attention.value_length": dh, "expert_count": n_exp,
          "expert_used_count": k, "expert_feed_forward_length": f, "context_length": ctx}
    return build_model_spec("qwen3moe", hp, ts, name=name, source="profile",
                            quant=expert_type, n_vocab=vocab, file_bytes=sum(x.n_bytes for x in ts))


def measure_read_bandwidth(n_threads: int, llc_bytes: int, reps: int = 5, clock=time.perf_counter) -> float:
    """Bytes/s of numpy uint64 max() over 4x LLC (>= 1 GiB), one pinned thread per CPU: the
    probe's read job for wall time, this function's own loop for thread CPU time."""
    total = max(GIB, 4 * llc_bytes)
    cpus = sorted(os.sched_getaffinity(0))[:n_threads]
    if clock is time.perf_counter:
        from moeplan.probes import dram

        job = dram.ReadJob(reader_cpus=tuple(cpus), place_cpus=tuple(cpus), mem_node=0,
                           bytes_per_thread=total // len(cpus) // 4096 * 4096)
        samples, _, _ = dram.run_read_job(job, reps=reps, warmup=1)
        return max(b / t for b, t in samples)
    arrays = [np.ones(total // 8 // n_threads, dtype=np.uint64) for _ in range(n_threads)]
    for a in arrays:
        a[::512] = 2  # touch every page (first touch)

    def reader(a: np.ndarray, cpu: int, barrier: threading.Barrier, out: list, i: int) -> None:
        os.sched_setaffinity(0, {cpu})
        best = float("inf")
        for _ in range(reps + 1):
            barrier.wait()
            t0 = clock()
            a.max()
            t = clock() - t0
            barrier.wait()
            best = min(best, t)
        out[i] = best

    out = [0.0] * n_threads
    barrier = threading.Barrier(n_threads)
    threads = [threading.Thread(target=reader, args=(a, cpus[i % len(cpus)], barrier, out, i))
               for i, a in enumerate(arrays)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return total / max(out)


def measure_h2d(torch, reps: int = 5) -> float:
    src = torch.empty(GIB // 2, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(GIB // 2, dtype=torch.uint8, device="cuda")
    dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return src.numel() / best


def decode_run(model, dtype: str, threads: int, tokens: int, layers: int, device: str, cpu_mode: str = "compute",
               clock=None):
    p = Placement(cpu_moe_layers=model.moe_layer_indices, n_ctx=512, n_ubatch=512, n_threads=threads)
    opt = ExecOptions(device=device, dtype=dtype, sample_layers=layers, cpu_decode_mode=cpu_mode)
    return run_bench(model, p, opt, RunSpec(n_prompt=0, n_tokens=tokens, n_warmup=2, routing=parse_routing("uniform")),
                     clock=clock)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="auto,fp16,fp32,bf16")
    ap.add_argument("--threads", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clock", default="wall", choices=("wall", "thread"),
                    help="thread: CPU time of the calling thread for both measurements (1 thread only), "
                         "which other tenants of a shared machine cannot stretch")
    ap.add_argument("--emulate-avx2", action="store_true",
                    help="rerun with torch, oneDNN and MKL held to AVX2 (see the module docstring)")
    args = ap.parse_args(argv)
    if args.emulate_avx2 and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
        argv_now = sys.argv[1:] if argv is None else list(argv)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *argv_now], env)
    import torch

    from moeplan.executor.native import choose_dtype, cpu_flags, f16c, native_bf16, torch_capability

    n_cpu = len(os.sched_getaffinity(0))
    threads = [int(x) for x in args.threads.split(",")] if args.threads else sorted({1, n_cpu})
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    if args.clock == "thread":
        threads = [1]
    llc = read_llc_bytes()
    model = qwen3_30b_a3b_shapes()
    torch.set_num_threads(threads[0])
    print(f"machine: {n_cpu} CPUs, last-level cache {llc / 2**20:.0f} MiB, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.2f}, clock: {args.clock}")
    env = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
           if k in os.environ}
    flags = cpu_flags()
    print(f"kernels: torch capability {torch_capability()} {env or '(no ISA limits)'}; CPU flags: "
          f"avx512f {'avx512f' in flags}, avx512_bf16/amx_bf16 {bool({'avx512_bf16', 'amx_bf16'} & flags)}, "
          f"f16c {f16c()}; native bf16 for the executor: {native_bf16()}; auto -> {choose_dtype(args.device)}")
    print(f"model: {model.name}, {len(model.moe_layers)} MoE blocks, all experts on the CPU tier, "
          f"{args.layers} blocks run and scaled\n")
    rows = []
    for dt in args.dtype.split(","):
        dt = choose_dtype(args.device) if dt == "auto" else dt
        if (dt, threads[0]) in {(r[0], r[1]) for r in rows}:
            continue
        for th in threads:
            best_bw, best = 0.0, None
            for _ in range(args.rounds):
                best_bw = max(best_bw, measure_read_bandwidth(th, llc, clock=clock))
                r = decode_run(model, dt, th, args.tokens, args.layers, args.device, clock=clock)
                if best is None or r["decode_s_per_token"] < best["decode_s_per_token"]:
                    best = r
                best_bw = max(best_bw, measure_read_bandwidth(th, llc, clock=clock))
            b = best["bytes_per_token_by_tier"]
            total_b = sum(b.values())
            t = best["decode_s_per_token"]
            cpu_t = best["decode_s_per_token_by_tier"]["cpu"]
            rows.append((dt, th, best_bw, t, total_b, total_b / best_bw / t, b["cpu"] / cpu_t / 1e9 if cpu_t else 0,
                         b["cpu"] / best_bw / cpu_t if cpu_t else 0))
            print(f"{dt} x {th} threads: DRAM read {best_bw / 1e9:.1f} GB/s; decode {1 / t:.2f} tok/s, "
                  f"{total_b / 1e9:.2f} GB/token -> roofline {total_b / best_bw * 1e3:.0f} ms vs measured "
                  f"{t * 1e3:.0f} ms = {total_b / best_bw / t:.0%}; CPU-expert tier {b['cpu'] / cpu_t / 1e9:.1f} GB/s "
                  f"= {b['cpu'] / best_bw / cpu_t:.0%} of DRAM", flush=True)
    print("\n| dtype | threads | DRAM read GB/s | decode tok/s | GB/token | share of roofline | CPU experts GB/s | "
          "CPU experts share |")
    print("|---|---|---|---|---|---|---|---|")
    for dt, th, bw, t, tb, frac, cbw, cfrac in rows:
        print(f"| {dt} | {th} | {bw / 1e9:.1f} | {1 / t:.2f} | {tb / 1e9:.2f} | {frac:.0%} | {cbw:.1f} | {cfrac:.0%} |")
    if args.device == "cuda":
        h2d = measure_h2d(torch)
        r = decode_run(model, args.dtype.split(",")[0], threads[-1], args.tokens, args.layers, "cuda", "transfer")
        tb = r["bytes_per_token_by_tier"]["transfer"]
        tt = r["decode_s_per_token_by_tier"]["transfer"]
        print(f"\ntransfer mode: {tb / tt / 1e9:.1f} GB/s of expert uploads vs pinned H2D {h2d / 1e9:.1f} GB/s "
              f"= {tb / tt / h2d:.0%}; decode {r['decode_tok_s']:.2f} tok/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
