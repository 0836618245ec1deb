#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan 8cc0b51b3d12ed9b (objective decode, hardware test-box)
# model: gpt-oss-120b (MXFP4, gpt-oss)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: routed experts of blocks 0-23 on the CPU (24 of 36 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 1024 for this model (128 experts, k=4); at -ub 1024 prefill copies the used CPU experts to the GPU
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of gpt-oss-120b MXFP4 (first shard of a split model)}"
exec llama-cli \
    -m "${MODEL}" \
    -ngl 37 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-3])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -c 26112 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 16 \
    -tb 16 \
    -b 2048 \
    -ub 1024 \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
