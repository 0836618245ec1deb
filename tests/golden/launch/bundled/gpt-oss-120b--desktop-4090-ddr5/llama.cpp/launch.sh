#!/usr/bin/env bash
# launch.sh: llama-server with the plan's placement
# written by moeplan VERSION from plan 8cc0b51b3d12ed9b (objective decode, hardware test-box)
# model: gpt-oss-120b (MXFP4, gpt-oss)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-23 on the CPU (24 of 36 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of gpt-oss-120b MXFP4 (first shard of a split model)}"
exec llama-server \
    -m "${MODEL}" \
    -ngl 37 \
    -ot '^blk\.([0-9]|1[0-9]|2[0-3])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 26112 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 16 \
    -tb 16 \
    -b 2048 \
    -ub 1024 \
    -lm mmap \
    -np 1 \
    "$@"
