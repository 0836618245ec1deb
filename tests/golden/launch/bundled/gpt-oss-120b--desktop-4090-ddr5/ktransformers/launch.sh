#!/usr/bin/env bash
# launch.sh: SGLang server with kt-kernel CPU experts
# written by moeplan VERSION from plan 8cc0b51b3d12ed9b (objective decode, hardware test-box)
# model: gpt-oss-120b (MXFP4, gpt-oss)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 42 of 128 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 16 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: --kt-method AMXINT4 needs an Intel CPU with AMX (Sapphire Rapids or newer) and expert weights converted by kt-kernel's conversion script; on other CPUs use GGUF weights with LLAMAFILE
# note: --kt-num-gpu-experts 42: KTransformers keeps 42 experts of each of the 36 MoE layers on the GPU (1512 in all), the same expert bytes as the plan's GPU layers; counted in MXFP4 bytes, so if the checkpoint stores experts in a wider type, lower it
# note: one kt-kernel worker pool: its threads and pages are bound to NUMA node 0 (worker_pool.cpp); on a multi-socket machine re-plan with --numa distribute for one pool per node
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of gpt-oss-120b (a folder or hub id)}"
: "${KT_WEIGHT_PATH:?set KT_WEIGHT_PATH to the folder of gpt-oss-120bs CPU expert weights converted for AMXINT4}"
exec python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --kt-method AMXINT4 \
    --kt-weight-path "${KT_WEIGHT_PATH}" \
    --kt-cpuinfer 16 \
    --kt-threadpool-count 1 \
    --kt-num-gpu-experts 42 \
    --kt-max-deferred-experts-per-token 0 \
    --context-length 26112 \
    --max-total-tokens 26112 \
    --max-running-requests 1 \
    --chunked-prefill-size 2048 \
    --kv-cache-dtype auto \
    --mem-fraction-static 0.80 \
    --trust-remote-code \
    --served-model-name gpt-oss-120b \
    --port 30000 \
    "$@"
