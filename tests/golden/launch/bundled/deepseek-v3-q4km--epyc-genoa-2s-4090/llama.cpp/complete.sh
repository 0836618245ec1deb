#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan fe62bee8a1cf16d4 (objective decode, hardware test-box)
# model: DeepSeek-V3 (Q4_K_M, deepseek2)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 3-60 on the CPU (58 of 58 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: numactl binds threads and memory to node(s) 0: the CPU experts must fit in those nodes' RAM
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of DeepSeek-V3 Q4_K_M (first shard of a split model)}"
exec numactl --cpunodebind=0 --membind=0 \
    llama-completion \
    -m "${MODEL}" \
    -ngl 62 \
    -ot '^blk\.([3-9]|[1-5][0-9]|60)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 32768 \
    -fa on \
    -ctk q8_0 \
    -ctv q8_0 \
    -t 96 \
    -tb 96 \
    -b 4096 \
    -ub 4096 \
    --numa numactl \
    -lm mmap \
    -no-cnv \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
