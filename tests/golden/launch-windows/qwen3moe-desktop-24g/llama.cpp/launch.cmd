@echo off
chcp 65001 >nul
rem launch.sh: llama-server with the plan's placement
rem written by moeplan VERSION from plan 4d748713a05c1efe (objective decode, hardware test-box)
rem model: tiny-qwen3moe (Q8_0, qwen3moe)
rem predicted: VRAM 18.0 GiB, RAM 140.0 GiB, decode 12.5 tok/s (10.0-15.0), prefill 240 tok/s
rem placement: routed experts of blocks 3-5 on the CPU (3 of 6 MoE layers), everything else on the GPU
rem flags for: llama.cpp 0.5.0-dev, commit 0c1e570 (upstream master, 2026-10-01) (no llama.cpp binary found: pass --bin to check your build)
rem note: the CPU experts stay in the page cache (mmap): llama.cpp will suggest --load-mode none; the plan chose mmap and counts those pages in its RAM figure
setlocal DisableDelayedExpansion
llama-server.exe ^
    -m "C:\models\Qwen3 MoE\tiny-Q8_0.gguf" ^
    -ngl 7 ^
    -ot "^blk\.(3|4|5)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.weight$=CPU" ^
    -fit off ^
    -c 32768 ^
    -fa on ^
    -ctk q8_0 ^
    -ctv q8_0 ^
    -t 16 ^
    -tb 16 ^
    -b 2048 ^
    -ub 1024 ^
    -lm mmap ^
    -np 1 ^
    %*
exit /b %ERRORLEVEL%
