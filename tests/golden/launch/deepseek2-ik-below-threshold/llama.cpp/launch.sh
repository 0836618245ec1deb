#!/usr/bin/env bash
# launch.sh: llama-server with the plan's placement
# written by moeplan VERSION from plan 130cde4fca4e25cc (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for ik_llama.cpp)
# placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: numactl binds threads and memory to node(s) 1: the CPU experts must fit in those nodes' RAM
# note: the plan was made for ik_llama.cpp; its speed figures are for that backend
set -euo pipefail
exec numactl --cpunodebind=1 --membind=1 \
    llama-server \
    -m /models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf \
    -ngl 10 \
    -ot '^blk\.[4-7]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 32768 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 32 \
    -tb 32 \
    -b 2048 \
    -ub 64 \
    --no-op-offload \
    --numa numactl \
    -lm none \
    -np 1 \
    "$@"
