@echo off
chcp 65001 >nul
rem launch.sh: llama-server with the plan's placement
rem written by moeplan VERSION from plan 1f0fb6dcab55bd23 (objective decode, hardware test-box)
rem model: tiny-deepseek2 (Q4_K_M, deepseek2)
rem predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
rem placement: routed experts of blocks 2-6 on the CPU (5 of 6 MoE layers), everything else on the GPU
rem flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
rem note: Windows: launch.cmd binds with `start /NODE 0 /AFFINITY mask` (threads on node 0, memory preferred there: the CPU experts must fit in its RAM); launch.sh has no binding
rem note: llama-bench has a single -t: bench.sh runs prefill with -t 32, not the plan's -tb 64
rem note: speculative decoding drafts 2 tokens per step (llama-server only; complete.sh and bench.sh measure plain decoding)
setlocal DisableDelayedExpansion
set "GGML_OP_OFFLOAD_MIN_BATCH=512"
start "" /B /WAIT /NODE 0 /AFFINITY 0xFFFFFFFF llama-server.exe ^
    -m C:\models\deepseek\tiny-Q4_K_M-00001-of-00002.gguf ^
    -ngl 10 ^
    -ot "^blk\.[2-6]\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU" ^
    -fit off ^
    -c 65536 ^
    -fa on ^
    -ctk f16 ^
    -ctv f16 ^
    -t 32 ^
    -tb 64 ^
    -b 4096 ^
    -ub 4096 ^
    -lm none ^
    -np 1 ^
    --spec-type draft-mtp ^
    --spec-draft-n-max 2 ^
    %*
exit /b %ERRORLEVEL%
