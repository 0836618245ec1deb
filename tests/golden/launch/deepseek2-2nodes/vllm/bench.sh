#!/usr/bin/env bash
# bench.sh: vllm bench serve against the running server
# written by moeplan VERSION from plan cff25a558f2fe34c (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for sglang)
# placement: every expert on the GPUs (16 in all)
# flags for: vLLM 0.33.0 (the --help=all of vllm serve and vllm bench serve) (no vllm found: pass --bin to check your install)
# note: per-GPU memory: about 2.0 GiB of 80.0 GiB (limit 0.90) on 2 node(s) x 8 GPU(s); weights from 0.0B parameters x 2 bytes (Hugging Face checkpoint)
# note: vLLM has no q8_0 KV cache; fp8 (1 byte per element) is the nearest, so the KV figure differs a little from the plan's
# note: multi-node: ray-head.sh on the head, ray-worker.sh on the 1 other node(s) (identical machines, same model path), then launch.sh on the head
# note: the plan was made for sglang; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of tiny-deepseek2 (a folder or hub id)}"
vllm bench serve \
    --model "${MODEL}" \
    --port 8000 \
    --dataset-name random \
    --random-input-len 512 \
    --random-output-len 128 \
    --num-prompts 8 \
    "$@"
