#!/usr/bin/env bash
# bench.sh: llama-bench of the plan; fails if llama-bench dropped the -ot overrides
# written by moeplan VERSION from plan 4d748713a05c1efe (objective decode, hardware test-box)
# model: tiny-qwen3moe (Q8_0, qwen3moe)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 3-5 on the CPU (3 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
llama-bench \
    -m '/models/Qwen3 MoE/tiny-Q8_0.gguf' \
    -ngl 7 \
    -ot '^blk\.(3|4|5)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa on \
    -ctk q8_0 \
    -ctv q8_0 \
    -t 16 \
    -b 2048 \
    -ub 1024 \
    -nopo 0 \
    -lm mmap \
    -p 1024 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"tensor_buft_overrides": "^blk\\.(3|4|5)\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"tensor_buft_overrides":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see tensor_buft_overrides in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
