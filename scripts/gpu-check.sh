#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, run the probes and the bundled executor in every
# tier on CUDA, and print the figures (H2D rate, decode tok/s per placement, cache hit rates,
# peak VRAM). Takes about 3-5 minutes on an H200; nothing is written outside a temp folder,
# which is removed at the end (KEEP=1 keeps it).
#
#   scripts/gpu-check.sh                  # after: pip install -e '.[dev]' with a CUDA torch
#   DEVICE=cpu PROMPT=32 TOKENS=2 scripts/gpu-check.sh   # dry run of the script without a GPU
#
# Knobs (environment): MODEL (bundled profile, default qwen3-30b-a3b), SAMPLE (blocks per class,
# default 2), TOKENS (decode, 32), PROMPT (prefill, 512), DEVICE (cuda), PYTHON, KEEP;
# MOEPLAN_LLAMA_BIN (a CUDA llama.cpp build/bin: also record its buffers per case, LLAMA_BUDGET
# seconds, into LLAMA_RECORD, default the temp folder).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-qwen3-30b-a3b}
SAMPLE=${SAMPLE:-2}
TOKENS=${TOKENS:-32}
PROMPT=${PROMPT:-512}
OUT=$(mktemp -d -t moeplan-gpu-check.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$OUT"' EXIT
T0=$(date +%s)
step() { echo; echo "== $*   [$(( $(date +%s) - T0 )) s]"; }

step "environment"
$PY - <<'EOF'
import os, torch
print("torch", torch.__version__, "| CUDA build", torch.version.cuda, "| CUDA available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU 0: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs")
print("CPUs:", len(os.sched_getaffinity(0)))
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current,clocks.max.memory --format=csv || echo "nvidia-smi not found"

step "moeplan probe --quick"
if moeplan probe --help >/dev/null 2>&1; then
  if timeout 180 moeplan probe --quick --json > "$OUT/probe.json" 2> "$OUT/probe.err"; then
    $PY - "$OUT/probe.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
def walk(d, path=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from walk(v, f"{path}.{k}" if path else k)
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from walk(v, f"{path}[{i}]")
    else:
        yield path, d
for path, v in walk(doc):
    if path.rsplit(".", 1)[-1] in ("achievable", "median", "n_samples", "spread"):
        continue  # a measured Figure: its value is enough here
    if isinstance(v, (int, float)) and any(s in path for s in ("bytes_per_s", "h2d", "d2h", "vram_bytes", "flop")):
        print(f"  {path.removesuffix('.value')} = {v:.4g}")
EOF
  else
    echo "probe failed (see below); continuing"; tail -5 "$OUT/probe.err"
  fi
else
  echo "this checkout has no 'moeplan probe' command yet: skipped"
fi

step "host <-> device copy rates (pinned, 1 GiB, best of 5)"
$PY - "$DEVICE" <<'EOF'
import sys, time, torch
if sys.argv[1] != "cuda":
    print("DEVICE is not cuda: skipped"); sys.exit()
n = 1 << 30
h = torch.empty(n, dtype=torch.uint8, pin_memory=True); d = torch.empty(n, dtype=torch.uint8, device="cuda")
for name, dst, src in (("H2D", d, h), ("D2H", h, d)):
    dst.copy_(src); torch.cuda.synchronize(); best = 1e9
    for _ in range(5):
        t = time.perf_counter(); dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    print(f"  {name}: {n / best / 1e9:.1f} GB/s")
pageable = torch.empty(n, dtype=torch.uint8)
d.copy_(pageable); torch.cuda.synchronize(); t = time.perf_counter(); d.copy_(pageable); torch.cuda.synchronize()
print(f"  H2D from pageable memory: {n / (time.perf_counter() - t) / 1e9:.1f} GB/s")
EOF

step "a GGUF for the mmap tier (Qwen3-30B-A3B block shapes, 4 blocks, F16, in the temp folder)"
$PY - "$OUT/mmap.gguf" <<'EOF'
import sys
import numpy as np
from gguf import GGUFWriter
d, f, n_exp, k, hq, hkv, dh, vocab, n_layer = 2048, 768, 128, 8, 32, 4, 128, 4096, 4
w = GGUFWriter(sys.argv[1], "qwen3moe")
w.add_name("qwen3-30b-a3b-blocks"); w.add_block_count(n_layer); w.add_context_length(4096)
w.add_embedding_length(d); w.add_feed_forward_length(6144); w.add_head_count(hq); w.add_head_count_kv(hkv)
w.add_key_length(dh); w.add_value_length(dh); w.add_expert_count(n_exp); w.add_expert_used_count(k)
w.add_expert_feed_forward_length(f); w.add_layer_norm_rms_eps(1e-6); w.add_file_type(1)
w.add_tokenizer_model("llama"); w.add_token_list([f"t{i}" for i in range(vocab)])
rng = np.random.default_rng(0)
def add(name, shape):
    a = (rng.standard_normal(tuple(reversed(shape)), dtype=np.float32) * 0.02).astype(np.float16) \
        if len(shape) < 3 else np.full(tuple(reversed(shape)), 0.01, dtype=np.float16)
    w.add_tensor(name, a)
add("token_embd.weight", (d, vocab)); add("output.weight", (d, vocab))
w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
for i in range(n_layer):
    p = f"blk.{i}."
    for n in ("attn_norm", "ffn_norm"):
        w.add_tensor(p + n + ".weight", np.ones(d, dtype=np.float32))
    for n in ("attn_q_norm", "attn_k_norm"):
        w.add_tensor(p + n + ".weight", np.ones(dh, dtype=np.float32))
    add(p + "attn_q.weight", (d, hq * dh)); add(p + "attn_k.weight", (d, hkv * dh))
    add(p + "attn_v.weight", (d, hkv * dh)); add(p + "attn_output.weight", (hq * dh, d))
    add(p + "ffn_gate_inp.weight", (d, n_exp))
    add(p + "ffn_gate_exps.weight", (d, f, n_exp)); add(p + "ffn_up_exps.weight", (d, f, n_exp))
    add(p + "ffn_down_exps.weight", (f, d, n_exp))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("  wrote", sys.argv[1])
EOF

run() {  # run LABEL ARGS...: one bench, one summary line
  local label=$1; shift
  if ! moeplan bench "$@" --device "$DEVICE" --tokens "$TOKENS" --json > "$OUT/r.json" 2> "$OUT/r.err"; then
    echo "  $label: FAILED"; cat "$OUT/r.json" "$OUT/r.err" | tail -5; return 0
  fi
  $PY - "$label" "$OUT/r.json" <<'EOF'
import json, sys
label, r = sys.argv[1], json.load(open(sys.argv[2]))
t = r["decode_s_per_token_by_tier"]; b = r["bytes_per_token_by_tier"]
tiers = " ".join(f"{k} {v * 1e3:.2f}ms" for k, v in t.items() if v)
moved = " ".join(f"{k} {v / 2**20:.0f}MiB" for k, v in b.items() if v)
hit = "-" if r["cache_hit_rate"] is None else f"{100 * r['cache_hit_rate']:.1f}%"
vram = "-" if r["peak_vram_bytes"] is None else f"{r['peak_vram_bytes'] / 2**30:.2f} GiB"
pre = "-" if r["prefill_tok_s"] is None else f"{r['prefill_tok_s']:.0f}"
print(f"  {label:<34} decode {r['decode_tok_s']:8.2f} tok/s | prefill {pre:>7} tok/s | cache hits {hit:>6} | "
      f"peak VRAM {vram} ({r.get('peak_vram_scope') or ''})")
print(f"  {'':<34} per token: {tiers} | {moved}")
EOF
}

COMMON=(--sample-layers "$SAMPLE" --prompt "$PROMPT")
step "bench $MODEL on $DEVICE: every tier (decode and prefill; sampled $SAMPLE blocks per class)"
run "all experts on the GPU"            "$MODEL" "${COMMON[@]}"
run "all experts on the CPU (compute)"  "$MODEL" "${COMMON[@]}" --all-cpu-moe
run "half the MoE layers on the CPU"    "$MODEL" "${COMMON[@]}" --cpu-moe-layers 24
run "CPU experts, transfer mode"        "$MODEL" "${COMMON[@]}" --all-cpu-moe --cpu-experts transfer
run "CPU experts, no op-offload"        "$MODEL" "${COMMON[@]}" --all-cpu-moe --no-op-offload
run "cache 8G lru, zipf:1.0"            "$MODEL" "${COMMON[@]}" --all-cpu-moe --gpu-expert-cache 8G --routing zipf:1.0
run "cache 8G lfu, zipf:1.0"            "$MODEL" "${COMMON[@]}" --all-cpu-moe --gpu-expert-cache 8G --routing zipf:1.0 --cache-policy lfu
run "cache 8G lru, half uploads"        "$MODEL" "${COMMON[@]}" --all-cpu-moe --gpu-expert-cache 8G --routing zipf:1.0 --cache-upload-share 0.5
run "fp16 weights, half on the CPU"     "$MODEL" "${COMMON[@]}" --cpu-moe-layers 24 --dtype fp16

step "mmap tier: experts read from the GGUF (page cache, then cold pages from the disk)"
run "mmap, page cache"                  "$OUT/mmap.gguf" --all-cpu-moe --expert-source mmap --prompt 0
run "mmap, evicted before each token"   "$OUT/mmap.gguf" --all-cpu-moe --expert-source mmap --prompt 0 --mmap-cold

step "roofline: CPU decode vs DRAM read bandwidth; transfer mode vs host-to-device rate"
timeout 300 $PY benchmarks/executor_roofline.py --device "$DEVICE" --rounds 1 --tokens 8 --dtype bf16 \
  --threads "$(nproc)" || echo "roofline benchmark failed or timed out"

if [ -n "${MOEPLAN_LLAMA_BIN:-}" ] && [ "$DEVICE" = cuda ]; then
  step "llama.cpp on CUDA: every buffer and nvidia-smi per case (benchmarks/cuda_memory_record.py)"
  timeout "${LLAMA_BUDGET:-300}" $PY benchmarks/cuda_memory_record.py --bin "$MOEPLAN_LLAMA_BIN" \
    --out "${LLAMA_RECORD:-$OUT/cuda_runs}" --budget-s "$(( ${LLAMA_BUDGET:-300} - 40 ))" \
    || echo "llama.cpp recording failed or timed out"
fi

if [ "$DEVICE" = cuda ]; then
  step "GPU tests (pytest -m gpu)"
  timeout 240 $PY -m pytest -q -m gpu tests/test_executor_gpu.py || echo "GPU tests failed"
fi
step "done"
