#!/usr/bin/env bash
# launch.sh: llama-server with the plan's placement
# written by moeplan VERSION from plan 9d025966e5043abe (objective decode, hardware test-box)
# model: DeepSeek-V4-Flash (MXFP4 scaled to 162.14 GB, deepseek4)
# predicted: VRAM 76.8 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 0-17 on the CPU (18 of 43 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: llama.cpp advises dropping the page cache before the first run with --numa (sync; echo 3 | sudo tee /proc/sys/vm/drop_caches), so pages are placed anew
# note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of DeepSeek-V4-Flash MXFP4 scaled to 162.14 GB (first shard of a split model)}"
exec llama-server \
    -m "${MODEL}" \
    -ngl 44 \
    -ot '^blk\.([0-9]|1[0-7])\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -fit off \
    -c 65536 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 64 \
    -tb 64 \
    -b 2048 \
    -ub 2048 \
    --numa distribute \
    -lm mmap \
    -np 1 \
    "$@"
