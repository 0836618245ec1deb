#!/usr/bin/env bash
# launch.sh: ik_llama.cpp llama-server with the plan's placement
# written by moeplan VERSION from plan fe62bee8a1cf16d4 (objective decode, hardware test-box)
# model: DeepSeek-V3 (Q4_K_M, deepseek2)
# predicted: VRAM 19.2 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for llama.cpp)
# placement: routed experts of blocks 3-60 on the CPU (58 of 58 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 1024 for this model (256 experts, k=8); at -ub 4096 prefill copies the used CPU experts to the GPU
# note: numactl binds threads and memory to node(s) 0: the CPU experts must fit in those nodes' RAM
# note: this GGUF has no attn_kv_b tensors (as converted by mainline llama.cpp): ik_llama.cpp computes them from attn_k_b/attn_v_b at load and runs -mla 3; they take 1037.0 MiB more on the blocks' devices, which the plan's VRAM figure (a plan for another backend) does not include
# note: the plan was made for llama.cpp; its speed figures are for that backend
set -euo pipefail
: "${MODEL:?set MODEL to the GGUF file of DeepSeek-V3 Q4_K_M (first shard of a split model)}"
exec numactl --cpunodebind=0 --membind=0 \
    llama-server \
    -m "${MODEL}" \
    -ngl 62 \
    -ot '^blk\.([3-9]|[1-5][0-9]|60)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU' \
    -c 32768 \
    -fa on \
    -ctk q8_0 \
    -ctv q8_0 \
    -t 96 \
    -tb 96 \
    -b 4096 \
    -ub 4096 \
    --numa numactl \
    -mla 3 \
    -np 1 \
    "$@"
