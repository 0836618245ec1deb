"""The torch kernels the executor's CPU decode could use, timed alone on this machine.

    python benchmarks/executor_kernels.py [--experts 48] [--reps 3] [--emulate-avx2]

One torch thread, thread CPU time, best of --reps. Weights: --experts experts of
Qwen3-30B-A3B's shapes (gate_up 1536 x 2048, down 2048 x 768), far more than the last-level
cache. Printed, in GB/s of weights read:
  - one row through torch.mv and through torch.mm (oneDNN for bf16) per dtype, gate_up shapes;
  - int8 weights through torch._weight_int8pack_mm (fp32, bf16 and fp16 activations);
  - a decode token's 8 of 128 experts as the executor runs them (torch.mv into buffer rows),
    as two torch._grouped_mm calls over the slot tensor, and gathered into one bmm (which
    copies every byte first);
  - fp16 gate_up weights on 4 KiB pages against huge pages (executor/hostmem.py);
and, in microseconds, one decode query's attention products over 64 and 512 cached positions
(32 query heads, 4 kv heads of 128) with torch's fp16 bmm and converted to fp32 first.
--emulate-avx2 reruns it with torch, oneDNN and MKL held to AVX2 (as executor_roofline.py does).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

D, F, N_EXP, K = 2048, 768, 128, 8
HQ, HKV, DK = 32, 4, 128


def best_of(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experts", type=int, default=48)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--emulate-avx2", action="store_true")
    args = ap.parse_args(argv)
    if args.emulate_avx2 and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv)],
                  env)
    import numpy as np
    import torch
    import torch.nn.functional as Fn

    from moeplan.executor.hostmem import host_empty, hugepage_status
    from moeplan.executor.native import torch_capability

    torch.set_num_threads(1)
    n, reps = args.experts, args.reps
    print(f"torch {torch.__version__}, capability {torch_capability()}, one thread, thread CPU time, "
          f"load average {os.getloadavg()[0]:.2f}; huge pages: {hugepage_status()[1]}")
    g = torch.Generator().manual_seed(0)
    x32 = torch.randn(D, generator=g)

    def gbs(nbytes: float, fn) -> str:
        return f"{nbytes / best_of(fn, reps) / 1e9:.1f}"

    print("\none row, gate_up shapes (GB/s):")
    for dt in (torch.float16, torch.float32, torch.bfloat16):
        w = (torch.randn(n, 2 * F, D, generator=g) * 0.02).to(dt)
        x = x32.to(dt)
        nb = w.numel() * w.element_size()
        print(f"  {str(dt)[6:]:9s} torch.mv {gbs(nb, lambda w=w, x=x: [torch.mv(w[i], x) for i in range(n)])}  "
              f"torch.mm {gbs(nb, lambda w=w, x=x: [torch.mm(x[None], w[i].t()) for i in range(n)])}")
    w8 = torch.randint(-127, 127, (n, 2 * F, D), dtype=torch.int8, generator=g)
    line = []
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x, s = x32.to(dt)[None], torch.rand(2 * F, generator=g).to(dt)
        rate = gbs(w8.numel(), lambda x=x, s=s: [torch._weight_int8pack_mm(x, w8[i], s) for i in range(n)])
        line.append(f"{str(dt)[6:]} x {rate}")
    print("  int8      torch._weight_int8pack_mm " + ", ".join(line))

    print(f"\na decode token's {K} of {N_EXP} experts, 16 tokens (GB/s):")
    for dt in (torch.float16, torch.float32):
        gu = (torch.randn(N_EXP, 2 * F, D, generator=g) * 0.02).to(dt)
        dn = (torch.randn(N_EXP, D, F, generator=g) * 0.02).to(dt)
        x = x32.to(dt)[None]
        rng = np.random.default_rng(0)
        sels = [np.sort(rng.permutation(N_EXP)[:K]) for _ in range(16)]
        nb = 16 * K * 3 * D * F * gu.element_size()
        bh, by = torch.empty(K, 2 * F, dtype=dt), torch.empty(K, D, dtype=dt)

        def rows(gu=gu, dn=dn, x=x, bh=bh, by=by, sels=sels):
            for sel in sels:
                for e, r in zip(sel.tolist(), bh.unbind(0)):
                    torch.mv(gu[e], x[0], out=r)
                a = Fn.silu(bh[:, :F]) * bh[:, F:]
                for e, ai, r in zip(sel.tolist(), a.unbind(0), by.unbind(0)):
                    torch.mv(dn[e], ai, out=r)

        def grouped(gu=gu, dn=dn, x=x, sels=sels):
            for sel in sels:
                offs = torch.from_numpy(np.cumsum(np.bincount(sel, minlength=N_EXP)).astype(np.int32))
                h = torch._grouped_mm(x.expand(K, D).contiguous(), gu.transpose(-2, -1), offs=offs)
                torch._grouped_mm(Fn.silu(h[:, :F]) * h[:, F:], dn.transpose(-2, -1), offs=offs)

        def gathered(gu=gu, dn=dn, x=x, sels=sels):
            for sel in sels:
                idx = torch.from_numpy(sel)
                h = torch.bmm(gu[idx], x.expand(K, D).unsqueeze(2)).squeeze(2)
                torch.bmm(dn[idx], (Fn.silu(h[:, :F]) * h[:, F:]).unsqueeze(2))

        print(f"  {str(dt)[6:]:9s} mv into rows {gbs(nb, rows)}  grouped_mm {gbs(nb, grouped)}  "
              f"gathered bmm {gbs(nb, gathered)}")

    print("\nfp16 gate_up weights, torch.mv (GB/s):")
    for huge in (False, True, False, True):
        w = host_empty((n, 2 * F, D), torch.float16, huge=huge)
        w.copy_((torch.randn(n, 2 * F, D, generator=g) * 0.02).half())
        x = x32.half()
        rate = gbs(w.numel() * 2, lambda w=w, x=x: [torch.mv(w[i], x) for i in range(n)])
        print(f"  {'huge pages' if huge else '4 KiB pages'}: {rate}")

    print("\none decode query's attention products (us):")
    for cells in (64, 512):
        q = torch.randn(HKV, HQ // HKV, DK, generator=g).half()
        k = torch.randn(HKV, cells, DK, generator=g).half()
        v = torch.randn(HKV, cells, DK, generator=g).half()

        def fp16(q=q, k=k, v=v):
            for _ in range(20):
                p = torch.softmax(torch.bmm(q, k.transpose(1, 2)).float() / math.sqrt(DK), -1)
                torch.bmm(p.half(), v)

        def fp32(q=q, k=k, v=v):
            for _ in range(20):
                p = torch.softmax(torch.bmm(q.float(), k.float().transpose(1, 2)) / math.sqrt(DK), -1)
                torch.bmm(p, v.float()).half()

        print(f"  {cells} cells: fp16 bmm {best_of(fp16, reps) / 20 * 1e6:.0f}, "
              f"converted to fp32 {best_of(fp32, reps) / 20 * 1e6:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
