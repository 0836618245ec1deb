#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan 49f2a26963965810 (objective decode, hardware test-box)
# model: Qwen3-30B-A3B (Q4_K_M, qwen3moe)
# predicted: VRAM 9.6 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-27 on the CPU (28 of 48 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of Qwen3-30B-A3B Q4_K_M (first shard of a split model)}"
exec llama-completion \
    -m "${MODEL}" \
    -ngl 49 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 16384 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 8 \
    -tb 8 \
    -b 2048 \
    -ub 512 \
    -lm mmap \
    -no-cnv \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
