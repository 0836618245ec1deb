#!/usr/bin/env bash
# launch.sh: SGLang server
# written by moeplan VERSION from plan 163ff2fcdf6a03b3 (objective decode, hardware test-box)
# model: tiny-qwen3moe (Q8_0, qwen3moe)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for vllm)
# placement: every expert on the GPUs (4 in all)
# flags for: SGLang 0.5.23 (the --help of its launch_server and bench_serving) (no sglang found: pass --bin the python that has it)
# note: per-GPU memory: about 2.0 GiB of 80.0 GiB (limit 0.85) on 1 node(s) x 4 GPU(s); weights from 0.0B parameters x 2 bytes (Hugging Face checkpoint)
# note: the plan was made for vllm; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of tiny-qwen3moe (a folder or hub id)}"
exec python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --tp-size 4 \
    --ep-size 4 \
    --context-length 16384 \
    --max-total-tokens 131072 \
    --max-running-requests 8 \
    --chunked-prefill-size 2048 \
    --kv-cache-dtype auto \
    --mem-fraction-static 0.85 \
    --trust-remote-code \
    --served-model-name tiny-qwen3moe \
    --port 30000 \
    "$@"
