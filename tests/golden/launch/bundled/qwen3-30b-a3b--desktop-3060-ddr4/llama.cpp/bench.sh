#!/usr/bin/env bash
# bench.sh: llama-bench of the plan; fails if llama-bench dropped the -ot overrides
# written by moeplan VERSION from plan 49f2a26963965810 (objective decode, hardware test-box)
# model: Qwen3-30B-A3B (Q4_K_M, qwen3moe)
# predicted: VRAM 9.6 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-27 on the CPU (28 of 48 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of Qwen3-30B-A3B Q4_K_M (first shard of a split model)}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
llama-bench \
    -m "${MODEL}" \
    -ngl 49 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 8 \
    -b 2048 \
    -ub 512 \
    -nopo 0 \
    -lm mmap \
    -p 512 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"tensor_buft_overrides": "^blk\\.([0-9]|1[0-9]|2[0-7])\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"tensor_buft_overrides":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see tensor_buft_overrides in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
