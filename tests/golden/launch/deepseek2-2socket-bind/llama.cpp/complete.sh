#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan 6e4e1feb2809d1e7 (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 2-6 on the CPU (5 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: numactl binds threads and memory to node(s) 0: the CPU experts must fit in those nodes' RAM
# note: llama-bench has a single -t: bench.sh runs prefill with -t 32, not the plan's -tb 64
# note: speculative decoding drafts 2 tokens per step (llama-server only; complete.sh and bench.sh measure plain decoding)
set -euo pipefail
export GGML_OP_OFFLOAD_MIN_BATCH=512
exec numactl --cpunodebind=0 --membind=0 \
    llama-completion \
    -m /models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf \
    -ngl 10 \
    -ot '^blk\.[2-6]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 65536 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 32 \
    -tb 64 \
    -b 4096 \
    -ub 4096 \
    --numa numactl \
    -lm none \
    -no-cnv \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
