#!/usr/bin/env bash
# bench.sh: sglang.bench_serving against the running server
# written by moeplan VERSION from plan cff25a558f2fe34c (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: every expert on the GPUs (16 in all)
# flags for: SGLang 0.5.23 (the --help of its launch_server and bench_serving) (no sglang found: pass --bin the python that has it)
# note: per-GPU memory: about 2.0 GiB of 80.0 GiB (limit 0.85) on 2 node(s) x 8 GPU(s); weights from 0.0B parameters x 2 bytes (Hugging Face checkpoint)
# note: SGLang has no q8_0 KV cache; fp8_e5m2 (1 byte per element) is the nearest
# note: multi-node: launch.sh on node 0 and launch-nodeN.sh on node N, all with HEAD_ADDR set to node 0's address; tensor parallel over all 16 GPUs
set -euo pipefail
python -m sglang.bench_serving \
    --backend sglang \
    --port 30000 \
    --dataset-name random \
    --random-input-len 512 \
    --random-output-len 128 \
    --num-prompts 8 \
    "$@"
