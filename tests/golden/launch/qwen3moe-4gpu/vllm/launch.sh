#!/usr/bin/env bash
# launch.sh: vLLM server
# written by moeplan VERSION from plan 163ff2fcdf6a03b3 (objective decode, hardware test-box)
# model: tiny-qwen3moe (Q8_0, qwen3moe)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: every expert on the GPUs (4 in all)
# flags for: vLLM 0.33.0 (the --help=all of vllm serve and vllm bench serve) (no vllm found: pass --bin to check your install)
# note: per-GPU memory: about 2.0 GiB of 80.0 GiB (limit 0.90) on 1 node(s) x 4 GPU(s); weights from 0.0B parameters x 2 bytes (Hugging Face checkpoint)
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of tiny-qwen3moe (a folder or hub id)}"
exec vllm serve \
    "${MODEL}" \
    --tensor-parallel-size 4 \
    --enable-expert-parallel \
    --max-model-len 16384 \
    --max-num-seqs 8 \
    --max-num-batched-tokens 2048 \
    --gpu-memory-utilization 0.90 \
    --kv-cache-dtype auto \
    --trust-remote-code \
    --served-model-name tiny-qwen3moe \
    --port 8000 \
    "$@"
