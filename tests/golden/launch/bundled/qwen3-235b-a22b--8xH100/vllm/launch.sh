#!/usr/bin/env bash
# launch.sh: vLLM server
# written by moeplan VERSION from plan 6c3a24a7ebac23a4 (objective decode, hardware test-box)
# model: Qwen3-235B-A22B (native (BF16), qwen3moe)
# predicted: VRAM 64.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: every expert on the GPUs (8 in all)
# flags for: vLLM 0.33.0 (the --help=all of vllm serve and vllm bench serve) (no vllm found: pass --bin to check your install)
# note: per-GPU memory: about 58.2 GiB of 80.0 GiB (limit 0.90) on 1 node(s) x 8 GPU(s); weights from profile tensor bytes
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of Qwen3-235B-A22B (a folder or hub id)}"
exec vllm serve \
    "${MODEL}" \
    --tensor-parallel-size 8 \
    --enable-expert-parallel \
    --max-model-len 4096 \
    --max-num-seqs 16 \
    --max-num-batched-tokens 2048 \
    --gpu-memory-utilization 0.90 \
    --kv-cache-dtype auto \
    --trust-remote-code \
    --served-model-name Qwen3-235B-A22B \
    --port 8000 \
    "$@"
