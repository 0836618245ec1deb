#!/usr/bin/env bash
# bench.sh: sglang.bench_serving against the running server
# written by moeplan VERSION from plan 57236b4151f7bb25 (objective decode, hardware test-box)
# model: tiny-gpt-oss (MXFP4_MOE, gpt-oss)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: 0 of 8 routed experts of every MoE layer on the GPU, the rest on the CPU (kt-kernel, 48 threads)
# flags for: kt-kernel 0.7.2 with SGLang 0.5.23 (the --kt-* flags of its launch_server --help) (no sglang found: pass --bin the python that has it)
# note: CPU experts read by kt-kernel's LLAMAFILE kernel from the GGUF folder
# note: --kt-num-gpu-experts 0: KTransformers keeps 0 experts of each of the 6 MoE layers on the GPU (0 in all), the same expert bytes as the plan's GPU layers; counted in MXFP4_MOE bytes, so if the checkpoint stores experts in a wider type, lower it
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
