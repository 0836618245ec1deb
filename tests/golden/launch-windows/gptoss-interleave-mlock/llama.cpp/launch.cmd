@echo off
chcp 65001 >nul
rem launch.sh: llama-server with the plan's placement
rem written by moeplan VERSION from plan 57236b4151f7bb25 (objective decode, hardware test-box)
rem model: tiny-gpt-oss (MXFP4_MOE, gpt-oss)
rem predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
rem placement: routed experts of blocks 0-5 on the CPU (6 of 6 MoE layers), everything else on the GPU
rem flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
rem note: Windows: the plan's 'interleave' has no Windows equivalent (no numactl, and llama.cpp's --numa does nothing there): threads run on every node and pages spread over the nodes
rem note: -ts splits the blocks evenly over 2 GPUs; CPU-expert blocks take less VRAM, so check nvidia-smi after loading
setlocal DisableDelayedExpansion
llama-server.exe ^
    -m C:\models\gpt-oss\tiny-MXFP4.gguf ^
    -ngl 7 ^
    -ot "^blk\.[0-5]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU" ^
    -fit off ^
    -c 131072 ^
    -fa on ^
    -ctk f16 ^
    -ctv f16 ^
    -t 48 ^
    -tb 48 ^
    -b 2048 ^
    -ub 256 ^
    --no-op-offload ^
    -lm mlock ^
    -ts 1,1 ^
    -np 1 ^
    %*
exit /b %ERRORLEVEL%
