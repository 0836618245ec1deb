#!/usr/bin/env bash
# bench.sh: ik_llama.cpp llama-bench of the plan; fails if it ran without the -ot overrides
# written by moeplan VERSION from plan 130cde4fca4e25cc (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 128 for this model (8 experts, k=2); at -ub 64 prefill computes the CPU experts on the CPU
# note: numactl binds threads and memory to node(s) 1: the CPU experts must fit in those nodes' RAM
# note: --no-mmap, not -rtr: -rtr would repack the CPU experts to row-interleaved types, which ik_llama.cpp's prefill multiplies about 3x slower (no int8 GEMM conversion for them)
# note: this GGUF has no attn_kv_b tensors (as converted by mainline llama.cpp): ik_llama.cpp computes them from attn_k_b/attn_v_b at load and runs -mla 3; they take 0.1 MiB more on the blocks' devices, counted in the plan's memory (weights_computed)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
numactl --cpunodebind=1 --membind=1 \
    llama-bench \
    -m /models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf \
    -ngl 10 \
    -ot '^blk\.[4-7]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fa 1 \
    -ctk f16 \
    -ctv f16 \
    -t 32 \
    -b 2048 \
    -ub 64 \
    --numa numactl \
    -fmoe 1 \
    -mla 3 \
    -rtr 0 \
    -mmp 0 \
    -p 512 \
    -n 128 \
    -r 3 \
    -o json \
    "$@" > "$here/bench.json"
expected='"override_tensor": "^blk\\.[4-7]\\.ffn_(up|down|gate|gate_up)_(ch|)exps\\.weight$=CPU"'
n_tests=$(grep -c '"override_tensor":' "$here/bench.json" || true)
n_ok=$(grep -cF -- "$expected" "$here/bench.json" || true)
if [ "$n_tests" -eq 0 ]; then
  echo "bench.sh: this llama-bench does not report override_tensor; the -ot overrides are unchecked" >&2
elif [ "$n_ok" -ne "$n_tests" ]; then
  echo "bench.sh: llama-bench did not run with the plan's -ot overrides; see override_tensor in $here/bench.json" >&2
  exit 1
fi
echo "bench.sh: results in $here/bench.json" >&2
