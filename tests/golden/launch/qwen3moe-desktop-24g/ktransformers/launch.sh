#!/usr/bin/env bash
# launch.sh: SGLang server with kt-kernel CPU experts
# written by moeplan VERSION from plan 4d748713a05c1efe (objective decode, hardware test-box)
# model: tiny-qwen3moe (Q8_0, qwen3moe)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 4 of 8 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 16 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: CPU experts read by kt-kernel's LLAMAFILE kernel from the GGUF folder
# note: --kt-num-gpu-experts 4: KTransformers keeps 4 experts of each of the 6 MoE layers on the GPU (24 in all), the same expert bytes as the plan's GPU layers; counted in Q8_0 bytes, so if the checkpoint stores experts in a wider type, lower it
# note: one kt-kernel worker pool: its threads and pages are bound to NUMA node 0 (worker_pool.cpp); on a multi-socket machine re-plan with --numa distribute for one pool per node
# note: SGLang has no q8_0 KV cache; fp8_e5m2 (1 byte per element) is the nearest
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of tiny-qwen3moe (a folder or hub id)}"
exec python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --kt-method LLAMAFILE \
    --kt-weight-path '/models/Qwen3 MoE' \
    --kt-cpuinfer 16 \
    --kt-threadpool-count 1 \
    --kt-num-gpu-experts 4 \
    --kt-max-deferred-experts-per-token 0 \
    --context-length 32768 \
    --max-total-tokens 32768 \
    --max-running-requests 1 \
    --chunked-prefill-size 2048 \
    --kv-cache-dtype fp8_e5m2 \
    --mem-fraction-static 0.75 \
    --trust-remote-code \
    --served-model-name tiny-qwen3moe \
    --port 30000 \
    "$@"
