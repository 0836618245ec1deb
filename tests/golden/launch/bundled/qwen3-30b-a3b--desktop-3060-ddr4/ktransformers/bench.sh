#!/usr/bin/env bash
# bench.sh: sglang.bench_serving against the running server
# written by moeplan VERSION from plan 49f2a26963965810 (objective decode, hardware test-box)
# model: Qwen3-30B-A3B (Q4_K_M, qwen3moe)
# predicted: VRAM 9.6 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 53 of 128 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 8 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: --kt-method AMXINT4 needs an Intel CPU with AMX (Sapphire Rapids or newer) and expert weights converted by kt-kernel's conversion script; on other CPUs use GGUF weights with LLAMAFILE
# note: --kt-num-gpu-experts 53: KTransformers keeps 53 experts of each of the 48 MoE layers on the GPU (2544 in all), the same expert bytes as the plan's GPU layers; counted in Q4_K_M bytes, so if the checkpoint stores experts in a wider type, lower it
# note: one kt-kernel worker pool: its threads and pages are bound to NUMA node 0 (worker_pool.cpp); on a multi-socket machine re-plan with --numa distribute for one pool per node
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
python -m sglang.bench_serving \
    --backend sglang \
    --port 30000 \
    --dataset-name random \
    --random-input-len 512 \
    --random-output-len 128 \
    --num-prompts 4 \
    "$@"
