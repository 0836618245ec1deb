# launch.sh: llama-server with the plan's placement
# written by moeplan VERSION from plan 99235d1dd2fafb10 (objective decode, hardware test-box)
# model: tiny-deepseek2 (Q4_K_M, deepseek2)
# predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for ik_llama.cpp)
# placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
# flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
# note: Windows: launch.cmd binds with `start /NODE 1 /AFFINITY mask` (threads on node 1, memory preferred there: the CPU experts must fit in its RAM); launch.sh has no binding
# note: the plan was made for ik_llama.cpp; its speed figures are for that backend
$ErrorActionPreference = 'Stop'
# the plan binds NUMA node 1: PowerShell cannot give a new process a preferred node, so
# launch.cmd runs it (start /NODE 1 /AFFINITY 0xFFFFFFFF) with the same arguments
& (Join-Path $PSScriptRoot 'launch.cmd') @args
exit $LASTEXITCODE
