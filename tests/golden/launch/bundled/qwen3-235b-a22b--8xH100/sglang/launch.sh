#!/usr/bin/env bash
# launch.sh: SGLang server
# written by moeplan VERSION from plan 6c3a24a7ebac23a4 (objective decode, hardware test-box)
# model: Qwen3-235B-A22B (native (BF16), qwen3moe)
# predicted: VRAM 64.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for vllm)
# placement: every expert on the GPUs (8 in all)
# flags for: SGLang 0.5.23 (the --help of its launch_server and bench_serving) (no sglang found: pass --bin the python that has it)
# note: per-GPU memory: about 58.2 GiB of 80.0 GiB (limit 0.85) on 1 node(s) x 8 GPU(s); weights from profile tensor bytes
# note: the plan was made for vllm; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of Qwen3-235B-A22B (a folder or hub id)}"
exec python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --tp-size 8 \
    --ep-size 8 \
    --context-length 4096 \
    --max-total-tokens 65536 \
    --max-running-requests 16 \
    --chunked-prefill-size 2048 \
    --kv-cache-dtype auto \
    --mem-fraction-static 0.85 \
    --trust-remote-code \
    --served-model-name Qwen3-235B-A22B \
    --port 30000 \
    "$@"
