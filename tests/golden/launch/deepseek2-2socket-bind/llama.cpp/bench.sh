#!/usr/bin/env bash
# bench.sh: llama-bench of the plan; fails if llama-bench dropped the -ot overrides
# written by moeplan VERSION from plan 6e4e1feb2809d1e7 (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 2-6 on the CPU (5 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: numactl binds threads and memory to node(s) 0: the CPU experts must fit in those nodes' RAM
# note: llama-bench has a single -t: bench.sh runs prefill with -t 32, not the plan's -tb 64
# note: speculative decoding drafts 2 tokens per step (llama-server only; complete.sh and bench.sh measure plain decoding)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export GGML_OP_OFFLOAD_MIN_BATCH=512
numactl --cpunodebind=0 --membind=0 \
    llama-bench \
    -m /models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf \
    -ngl 10 \
    -ot '^blk\.[2-6]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 32 \
    -b 4096 \
    -ub 4096 \
    -nopo 0 \
    --numa numactl \
    -lm none \
    -p 4096 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"tensor_buft_overrides": "^blk\\.[2-6]\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"tensor_buft_overrides":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see tensor_buft_overrides in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
