# launch.sh: ik_llama.cpp llama-server with the plan's placement
# written by moeplan VERSION from plan 99235d1dd2fafb10 (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
# placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
# flags for: ik_llama.cpp commit 8337e4cd3 (2026-08-15, read from its source) (no ik_llama.cpp binary found: pass --bin)
# note: op offload: ik_llama.cpp copies CPU experts to the GPU when ubatch*k >= 32*n_experts, i.e. from -ub 128 for this model (8 experts, k=2); at -ub 64 prefill computes the CPU experts on the CPU
# note: Windows: launch.cmd binds with `start /NODE 1 /AFFINITY mask` (threads on node 1, memory preferred there: the CPU experts must fit in its RAM); launch.sh has no binding
# note: --no-mmap, not -rtr: -rtr would repack the CPU experts to row-interleaved types, which ik_llama.cpp's prefill multiplies about 3x slower (no int8 GEMM conversion for them)
# note: this GGUF has no attn_kv_b tensors (as converted by mainline llama.cpp): ik_llama.cpp computes them from attn_k_b/attn_v_b at load and runs -mla 3; they take 0.1 MiB more on the blocks' devices, counted in the plan's memory (weights_computed)
$ErrorActionPreference = 'Stop'
# the plan binds NUMA node 1: PowerShell cannot give a new process a preferred node, so
# launch.cmd runs it (start /NODE 1 /AFFINITY 0xFFFFFFFF) with the same arguments
& (Join-Path $PSScriptRoot 'launch.cmd') @args
exit $LASTEXITCODE
