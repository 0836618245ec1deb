#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan 4d748713a05c1efe (objective decode, hardware test-box)
# model: tiny-qwen3moe (Q8_0, qwen3moe)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: routed experts of blocks 3-5 on the CPU (3 of 6 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 128 for this model (8 experts, k=2); at -ub 1024 prefill copies the used CPU experts to the GPU
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
exec llama-cli \
    -m '/models/Qwen3 MoE/tiny-Q8_0.gguf' \
    -ngl 7 \
    -ot '^blk\.(3|4|5)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -c 32768 \
    -fa on \
    -ctk q8_0 \
    -ctv q8_0 \
    -t 16 \
    -tb 16 \
    -b 2048 \
    -ub 1024 \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
