#!/usr/bin/env bash
# launch.sh: ik_llama.cpp llama-server with the plan's placement
# written by moeplan VERSION from plan 49f2a26963965810 (objective decode, hardware test-box)
# model: Qwen3-30B-A3B (Q4_K_M, qwen3moe)
# predicted: VRAM 9.6 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: routed experts of blocks 0-27 on the CPU (28 of 48 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 512 for this model (128 experts, k=8); at -ub 512 prefill copies the used CPU experts to the GPU
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of Qwen3-30B-A3B Q4_K_M (first shard of a split model)}"
exec llama-server \
    -m "${MODEL}" \
    -ngl 49 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -c 16384 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 8 \
    -tb 8 \
    -b 2048 \
    -ub 512 \
    -np 1 \
    "$@"
