#!/usr/bin/env bash
# bench.sh: ik_llama.cpp llama-bench of the plan; fails if it ran without the -ot overrides
# written by moeplan VERSION from plan 8cc0b51b3d12ed9b (objective decode, hardware test-box)
# model: gpt-oss-120b (MXFP4, gpt-oss)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: routed experts of blocks 0-23 on the CPU (24 of 36 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 1024 for this model (128 experts, k=4); at -ub 1024 prefill copies the used CPU experts to the GPU
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of gpt-oss-120b MXFP4 (first shard of a split model)}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
llama-bench \
    -m "${MODEL}" \
    -ngl 37 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-3])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa 1 \
    -ctk f16 \
    -ctv f16 \
    -t 16 \
    -b 2048 \
    -ub 1024 \
    -fmoe 1 \
    -rtr 0 \
    -mmp 1 \
    -p 1024 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"override_tensor": "^blk\\.([0-9]|1[0-9]|2[0-3])\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"override_tensor":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ]; then
  echo "bench.sh: this llama-bench does not report override_tensor; the -ot overrides are unchecked" >&2
elif [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see override_tensor in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
