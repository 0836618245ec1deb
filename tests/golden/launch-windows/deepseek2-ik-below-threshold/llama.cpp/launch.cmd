@echo off
chcp 65001 >nul
rem launch.sh: llama-server with the plan's placement
rem written by moeplan VERSION from plan 99235d1dd2fafb10 (objective decode, hardware test-box)
rem model: tiny-deepseek2 (Q4_K_M, deepseek2)
rem predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s (plan made for ik_llama.cpp)
rem placement: routed experts of blocks 4-7 on the CPU (4 of 6 MoE layers), everything else on the GPU
rem flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
rem note: Windows: launch.cmd binds with `start /NODE 1 /AFFINITY mask` (threads on node 1, memory preferred there: the CPU experts must fit in its RAM); launch.sh has no binding
rem note: the plan was made for ik_llama.cpp; its speed figures are for that backend
setlocal DisableDelayedExpansion
start "" /B /WAIT /NODE 1 /AFFINITY 0xFFFFFFFF llama-server.exe ^
    -m C:\models\deepseek\tiny-Q4_K_M-00001-of-00002.gguf ^
    -ngl 10 ^
    -ot "^blk\.[4-7]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU" ^
    -fit off ^
    -c 32768 ^
    -fa on ^
    -ctk f16 ^
    -ctv f16 ^
    -t 32 ^
    -tb 32 ^
    -b 2048 ^
    -ub 64 ^
    --no-op-offload ^
    -lm none ^
    -np 1 ^
    %*
exit /b %ERRORLEVEL%
