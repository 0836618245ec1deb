#!/usr/bin/env bash
# launch.sh: SGLang server with kt-kernel CPU experts
# written by moeplan VERSION from plan 6e4e1feb2809d1e7 (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 1 of 8 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 32 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: CPU experts read by kt-kernel's LLAMAFILE kernel from the GGUF folder
# note: --kt-num-gpu-experts 1: KTransformers keeps 1 experts of each of the 6 MoE layers on the GPU (6 in all), the same expert bytes as the plan's GPU layers; counted in Q4_K_M bytes, so if the checkpoint stores experts in a wider type, lower it
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of tiny-deepseek2 (a folder or hub id)}"
exec numactl --cpunodebind=0 --membind=0 \
    python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --kt-method LLAMAFILE \
    --kt-weight-path /models/deepseek \
    --kt-cpuinfer 32 \
    --kt-threadpool-count 1 \
    --kt-num-gpu-experts 1 \
    --kt-max-deferred-experts-per-token 0 \
    --context-length 65536 \
    --max-total-tokens 65536 \
    --max-running-requests 1 \
    --chunked-prefill-size 4096 \
    --kv-cache-dtype auto \
    --mem-fraction-static 0.19 \
    --trust-remote-code \
    --served-model-name tiny-deepseek2 \
    --port 30000 \
    "$@"
