#!/usr/bin/env bash
# bench.sh: llama-bench of the plan; fails if llama-bench dropped the -ot overrides
# written by moeplan VERSION from plan 57236b4151f7bb25 (objective decode, hardware test-box)
# model: tiny-gpt-oss (MXFP4_MOE, gpt-oss)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-5 on the CPU (6 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: llama.cpp advises dropping the page cache before the first run with --numa (sync; echo 3 | sudo tee /proc/sys/vm/drop_caches), so pages are placed anew
# note: -ts splits the blocks evenly over 2 GPUs; CPU-expert blocks take less VRAM, so check nvidia-smi after loading
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
numactl --interleave=0,1 \
    llama-bench \
    -m /models/gpt-oss/tiny-MXFP4.gguf \
    -ngl 7 \
    -ot '^blk\.[0-5]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 48 \
    -b 2048 \
    -ub 256 \
    -nopo 1 \
    --numa distribute \
    -lm mlock \
    -ts 1/1 \
    -p 512 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"tensor_buft_overrides": "^blk\\.[0-5]\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"tensor_buft_overrides":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ] || [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see tensor_buft_overrides in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
