#!/usr/bin/env bash
# bench.sh: llama-bench of the plan; fails if llama-bench dropped the -ot overrides
# written by moeplan VERSION from plan 9d025966e5043abe (objective decode, hardware test-box)
# model: DeepSeek-V4-Flash (MXFP4 scaled to 162.14 GB, deepseek4)
# predicted: VRAM 76.8 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-17 on the CPU (18 of 43 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: llama.cpp advises dropping the page cache before the first run with --numa (sync; echo 3 | sudo tee /proc/sys/vm/drop_caches), so pages are placed anew
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of DeepSeek-V4-Flash MXFP4 scaled to 162.14 GB (first shard of a split model)}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
llama-bench \
    -m "${MODEL}" \
    -ngl 44 \
    -ot '^blk\.([0-9]|1[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 64 \
    -b 2048 \
    -ub 2048 \
    -nopo 0 \
    --numa distribute \
    -lm mmap \
    -p 2048 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"tensor_buft_overrides": "^blk\\.([0-9]|1[0-7])\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"tensor_buft_overrides":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see tensor_buft_overrides in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
