"""CUDA-only allocations (planner/memory/cuda_runtime.py): the pool's ops and FA's F16 KV copies,
computed by hand from the llama.cpp 0c1e570 formulas quoted in the module, and the CPU/RPC build
left exactly as it was."""
from __future__ import annotations

from moeplan.commands.placement_opts import resolve_placement
from moeplan.planner.memory import cuda_runtime as cr
from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
from moeplan.planner.model.spec import Tensor
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import MIB


def _qwen35(fa: bool = True, ub: int = 512, kv: str = "q8_0"):
    m = load_profile("qwen3.5-35b-a3b", "Q4_K_M")
    p = resolve_placement(m, backend="llama.cpp", ctx="65536", kv_type=kv, kv_type_v=kv, no_flash_attn=not fa,
                          ubatch=ub, batch=max(2048, ub), all_cpu_moe=True)
    return m, p


def test_q8_1_activations_and_j_max():
    # 512 rows of 2048 values, 144 bytes per 128 (block_q8_1_mmq)
    assert cr.q8_1_bytes(512, 2048) == 512 * 2048 * 144 // 128 == 1_179_648
    # a row length that is not a multiple of 512 is padded (MATRIX_ROW_PADDING)
    assert cr.q8_1_bytes(1, 576) == 1024 * 144 // 128
    assert cr.j_max(1) == 0 and cr.j_max(8) == 8 and cr.j_max(13) == 8 and cr.j_max(512) == 128


def test_stream_k_fixup_buffer():
    # 2048 x 512 dense matmul on 132 SMs: 16 x 4 tiles, 48% efficient -> 132 stream-k blocks,
    # 64 % 132 != 0 -> 132 x 128 x 128 floats = 8.25 MiB
    assert cr.mmq_fixup_bytes(2048, 512, 1, 132) == 132 * 128 * 128 * 4 == int(8.25 * MIB)
    # 256 experts of 512 rows at 512 tokens: 4 x 4 x 256 = 4096 tiles, 96% efficient -> tiling, no fixup
    assert cr.mmq_fixup_bytes(512, 512, 256, 132) == 0
    # on AMD the stream-k grid is always one block per SM
    assert cr.mmq_fixup_bytes(512, 512, 256, 132, nvidia=False) == 132 * 128 * 128 * 4
    # 84 SMs (RTX 5080): 84 x 64 KiB
    assert cr.mmq_fixup_bytes(2048, 512, 1, 84) == 84 * 128 * 128 * 4


def test_mul_mat_id_pool_op_by_hand():
    t = Tensor("blk.3.ffn_gate_exps.weight", (2048, 512, 256), "Q4_K", 0, 3, "experts")
    op = cr.matmul_pool_op(t, 512, 512, 8, 132)
    rows = 512 * 8
    # ids_src1, ids_dst, expert_bounds, q8_1 activations (ne11 = 1 -> no spare blocks), no fixup
    assert op.allocs == (4 * rows, 4 * rows, 4 * 257, rows * 2048 * 144 // 128, 0)
    assert op.n_bytes == 16384 + 16384 + 1152 + 9_437_184
    down = Tensor("blk.3.ffn_down_exps.weight", (512, 2048, 256), "Q6_K", 0, 3, "experts")
    # the down projection sees k = 8 rows per token: J_max(8) = 8 spare blocks
    assert cr.matmul_pool_op(down, 512, 512, 8, 132).allocs[3] == rows * 512 * 144 // 128 + 8 * 144


def test_cublas_paths():
    f16 = Tensor("blk.0.attn_q.weight", (4096, 4096), "F16", 0, 0, "attn")
    op = cr.matmul_pool_op(f16, 512, 512, 8, 132)
    assert op is not None and op.allocs == (512 * 4096 * 2, 512 * 4096 * 2)  # src1 -> F16, F16 dst
    bf16 = Tensor("blk.0.attn_q.weight", (4096, 4096), "BF16", 0, 0, "attn")
    assert cr.matmul_pool_op(bf16, 512, 512, 8, 132).allocs == (512 * 4096 * 2,)  # BF16 writes F32
    assert cr.matmul_pool_op(f16, 16, 16, 8, 132) is None  # MMF up to 16 columns
    f32 = Tensor("blk.0.ffn_gate_inp.weight", (2048, 256), "F32", 0, 0, "router")
    assert cr.matmul_pool_op(f32, 512, 512, 8, 132) is None


def test_qwen35_pool_and_fa_copies():
    m, p = _qwen35()
    # the widest dense matmul input: ssm_out / attn_output (4096 -> 2048) with its 8.25 MiB fixup
    pool, top = cr.cuda_pool_bytes(m, p, set(p.cpu_moe_layers), True, 132)
    assert top.endswith("ssm_out.weight") or top.endswith("attn_output.weight")
    assert pool == 12 * MIB  # 512 x 4096 x 1.125 + 128 x 144 + 8.25 MiB = 10.5 MiB -> 2 MiB steps
    # FA with a q8_0 cache: F16 K and V of the 10 full-attention layers' kind: 65536 cells x 512 x 2 each
    assert cr.fa_f16_kv_bytes(m, p) == 2 * 65536 * 512 * 2
    assert cr.fa_f16_kv_bytes(m, p.with_(cache_type_k="f16", cache_type_v="f16")) == 0


def test_no_fa_kqv_conversion_dominates():
    m, p = _qwen35(fa=False, kv="f16")
    pool, top = cr.cuda_pool_bytes(m, p, set(p.cpu_moe_layers), True, 132)
    assert top.startswith("KQV")
    # KQ (F32) of 65536 cells x 512 tokens x 16 heads to F16, and a 256 x 512 x 16 F16 dst
    assert pool == cr._pad(65536 * 512 * 16 * 2 + 256 * 512 * 16 * 2 + 2 * 16 * 8 + 16 * 8 + 3 * 128, 2 * MIB)


def test_cpu_build_unchanged_and_cuda_build_adds():
    m, p = _qwen35()
    cpu = estimate_memory(m, p, MemoryConstants())
    cuda = estimate_memory(m, p, MemoryConstants(gpu_build="cuda"))
    assert cpu.get("cuda_pool") == 0
    assert cuda.get("cuda_pool") == 12 * MIB
    assert cuda.vram_bytes - cpu.vram_bytes >= 12 * MIB
    # several GPUs: each device's pool is in its VRAM
    p2 = p.with_(n_gpus=2)
    two = estimate_memory(m, p2, MemoryConstants(gpu_build="cuda"))
    assert all(d.pool_bytes > 0 for d in two.devices)
    assert sum(d.vram_bytes for d in two.devices) == two.vram_bytes
    assert all(d.pool_bytes == 0 for d in estimate_memory(m, p2, MemoryConstants()).devices)


def test_ik_llama_puts_fa_copies_in_the_pool():
    m, p = _qwen35()
    ik = p.with_(backend="ik_llama.cpp")
    assert cr.fa_f16_kv_bytes(m, ik) == 0
    fa_ops = [o for o in cr.attention_pool_ops(m, ik) if o.what.startswith("FA F16")]
    # K and V of the full-attention kind, 65536 cells x 512 values x 2 bytes each
    assert [o.allocs for o in fa_ops] == [(65536 * 512 * 2, 65536 * 512 * 2)]
    pool, top = cr.cuda_pool_bytes(m, ik, set(ik.cpu_moe_layers), True, 132)
    assert top.startswith("FA F16") and pool == 128 * MIB


def test_the_profile_picks_the_build():
    from dataclasses import replace

    from moeplan.planner.memory.constants import gpu_build_of, memory_constants
    from moeplan.probes.hwprofile import load_hardware

    hw = load_hardware("desktop-4090-ddr5", allow_probe=False)
    assert gpu_build_of(hw, "llama.cpp") == "cuda" == memory_constants(hw, "llama.cpp").gpu_build
    assert gpu_build_of(hw, "ik_llama.cpp") == "cuda"
    amd = replace(hw, gpus=tuple(replace(g, vendor="amd") for g in hw.gpus))
    assert gpu_build_of(amd, "llama.cpp") == "rocm"
    assert gpu_build_of(replace(hw, gpus=()), "llama.cpp") == ""
    assert memory_constants(None, "llama.cpp").gpu_build == ""  # no profile: the CPU/RPC build's accounting


def test_per_gpu_pool_in_estimate_json_and_table(tmp_path):
    import json

    from typer.testing import CliRunner

    from moeplan.cli import app

    hw = tmp_path / "2x3090.json"
    run = CliRunner().invoke
    assert run(app, ["hardware", "--gpu", "RTX 3090", "--gpu-count", "2", "--cpu", "Ryzen 9 5950X", "--ram", "128G",
                     "--out", str(hw)]).exit_code == 0
    r = run(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--ctx", "8k", "--ts", "1,1", "--json"])
    per = json.loads(r.stdout)["memory"]["per_gpu"]
    # each GPU (a CUDA build; the SM count stays the H100 default) runs its blocks' matmuls: a pool in
    # 2 MiB steps, in its VRAM
    assert len(per) == 2 and all(g["pool_bytes"] > 0 and g["pool_bytes"] % (2 * MIB) == 0 for g in per)
    assert all(g["vram_bytes"] == g["weights_dense_bytes"] + g["weights_experts_bytes"] + g["kv_bytes"]
               + g["compute_bytes"] + g["context_bytes"] + g["pool_bytes"] for g in per)
    table = run(app, ["estimate", "qwen3-30b-a3b", "--hw", str(hw), "--ctx", "8k", "--ts", "1,1"], terminal_width=200)
    assert " pool " in table.stdout
