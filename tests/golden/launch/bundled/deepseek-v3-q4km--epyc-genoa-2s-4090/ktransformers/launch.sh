#!/usr/bin/env bash
# launch.sh: SGLang server with kt-kernel CPU experts
# written by moeplan VERSION from plan fe62bee8a1cf16d4 (objective decode, hardware test-box)
# model: DeepSeek-V3 (Q4_K_M, deepseek2)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 0 of 256 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 96 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: --kt-method AMXINT4 needs an Intel CPU with AMX (Sapphire Rapids or newer) and expert weights converted by kt-kernel's conversion script; on other CPUs use GGUF weights with LLAMAFILE
# note: --kt-num-gpu-experts 0: KTransformers keeps 0 experts of each of the 58 MoE layers on the GPU (0 in all), the same expert bytes as the plan's GPU layers; counted in Q4_K_M bytes, so if the checkpoint stores experts in a wider type, lower it
# note: SGLang has no q8_0 KV cache; fp8_e5m2 (1 byte per element) is the nearest
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the Hugging Face checkpoint of DeepSeek-V3 (a folder or hub id)}"
: "${KT_WEIGHT_PATH:?set KT_WEIGHT_PATH to the folder of DeepSeek-V3s CPU expert weights converted for AMXINT4}"
exec numactl --cpunodebind=0 --membind=0 \
    python -m sglang.launch_server \
    --model-path "${MODEL}" \
    --kt-method AMXINT4 \
    --kt-weight-path "${KT_WEIGHT_PATH}" \
    --kt-cpuinfer 96 \
    --kt-threadpool-count 1 \
    --kt-num-gpu-experts 0 \
    --kt-max-deferred-experts-per-token 0 \
    --context-length 32768 \
    --max-total-tokens 32768 \
    --max-running-requests 1 \
    --chunked-prefill-size 4096 \
    --kv-cache-dtype fp8_e5m2 \
    --mem-fraction-static 0.80 \
    --trust-remote-code \
    --served-model-name DeepSeek-V3 \
    --port 30000 \
    "$@"
