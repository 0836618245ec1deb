#!/usr/bin/env bash
# bench.sh: sglang.bench_serving against the running server
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
python -m sglang.bench_serving \
    --backend sglang \
    --port 30000 \
    --dataset-name random \
    --random-input-len 4096 \
    --random-output-len 128 \
    --num-prompts 4 \
    "$@"
