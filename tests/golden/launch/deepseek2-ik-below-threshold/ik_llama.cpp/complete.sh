#!/usr/bin/env bash
# complete.sh: one short completion with the plan's placement (add --verbose to see each tensor's buffer)
# written by moeplan VERSION from plan 130cde4fca4e25cc (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 128 for this model (8 experts, k=2); at -ub 64 prefill computes the CPU experts on the CPU
# note: numactl binds threads and memory to node(s) 1: the CPU experts must fit in those nodes' RAM
# note: --no-mmap, not -rtr: -rtr would repack the CPU experts to row-interleaved types, which ik_llama.cpp's prefill multiplies about 3x slower (no int8 GEMM conversion for them)
# note: this GGUF has no attn_kv_b tensors (as converted by mainline llama.cpp): ik_llama.cpp computes them from attn_k_b/attn_v_b at load and runs -mla 3; they take 0.1 MiB more on the blocks' devices, counted in the plan's memory (weights_computed)
set -euo pipefail
exec numactl --cpunodebind=1 --membind=1 \
    llama-cli \
    -m /models/deepseek/tiny-Q4_K_M-00001-of-00002.gguf \
    -ngl 10 \
    -ot '^blk\.[4-7]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -c 32768 \
    -fa on \
    -ctk f16 \
    -ctv f16 \
    -t 32 \
    -tb 32 \
    -b 2048 \
    -ub 64 \
    --numa numactl \
    -mla 3 \
    --no-mmap \
    -p 'The capital of France is' \
    -n 32 \
    "$@"
