"""ModelSpecs and hardware profiles with round numbers, for hand-worked planner tests."""
from __future__ import annotations

from moeplan.planner.cost.priors import BackendPriors
from moeplan.planner.hardware.profile import Cpu, Figure, Gpu, HardwareProfile, NumaNode, System
from moeplan.planner.model import archs
from moeplan.planner.model.spec import LayerSpec, ModelSpec, make_tensor

GIB = 1024**3
MIB = 1024**2


def toy_model(n_layers: int = 8, n_experts: int = 8, k: int = 2, n_embd: int = 1024, n_ff_exp: int = 1024,
              n_vocab: int = 32768, n_head: int = 8, n_head_kv: int = 2, head_dim: int = 128,
              n_dense_lead: int = 0, ctx_train: int = 32768) -> ModelSpec:
    """A GQA MoE model in F16. Expert bytes per layer = 3 * n_embd * n_ff_exp * n_experts * 2."""
    hp = {"block_count": n_layers, "embedding_length": n_embd, "attention.head_count": n_head,
          "attention.head_count_kv": n_head_kv, "attention.key_length": head_dim,
          "attention.value_length": head_dim, "expert_count": n_experts, "expert_used_count": k,
          "context_length": ctx_train}
    T = make_tensor
    layers = []
    for il in range(n_layers):
        b = f"blk.{il}."
        ts = [T(b + "attn_norm.weight", (n_embd,), "F32", n_embd * 4),
              T(b + "attn_q.weight", (n_embd, n_head * head_dim), "F16", n_embd * n_head * head_dim * 2),
              T(b + "attn_k.weight", (n_embd, n_head_kv * head_dim), "F16", n_embd * n_head_kv * head_dim * 2),
              T(b + "attn_v.weight", (n_embd, n_head_kv * head_dim), "F16", n_embd * n_head_kv * head_dim * 2),
              T(b + "attn_output.weight", (n_head * head_dim, n_embd), "F16", n_embd * n_head * head_dim * 2),
              T(b + "ffn_norm.weight", (n_embd,), "F32", n_embd * 4)]
        if il < n_dense_lead:
            ts += [T(b + f"ffn_{w}.weight", (n_embd, 4 * n_ff_exp) if w != "down" else (4 * n_ff_exp, n_embd),
                     "F16", n_embd * 4 * n_ff_exp * 2) for w in ("gate", "up", "down")]
            kind = "dense"
        else:
            ts += [T(b + "ffn_gate_inp.weight", (n_embd, n_experts), "F32", n_embd * n_experts * 4)]
            for w in ("gate", "up", "down"):
                shape = (n_embd, n_ff_exp, n_experts) if w != "down" else (n_ff_exp, n_embd, n_experts)
                ts.append(T(b + f"ffn_{w}_exps.weight", shape, "F16", n_embd * n_ff_exp * n_experts * 2))
            kind = "moe"
        label, kv = archs.layer_kv("qwen3moe", hp, il)
        layers.append(LayerSpec(il, kind, label, kv, tuple(ts)))
    globals_ = (T("token_embd.weight", (n_embd, n_vocab), "F16", n_embd * n_vocab * 2),
                T("output_norm.weight", (n_embd,), "F32", n_embd * 4),
                T("output.weight", (n_embd, n_vocab), "F16", n_embd * n_vocab * 2))
    total = sum(t.n_bytes for t in globals_) + sum(layer.n_bytes for layer in layers)
    return ModelSpec(name="toy", arch="qwen3moe", source="profile", quant="F16", n_embd=n_embd, n_vocab=n_vocab,
                     n_ctx_train=ctx_train, n_head=n_head, n_experts=n_experts, n_experts_used=k,
                     n_experts_shared=0, n_ff_exp=n_ff_exp, layers=tuple(layers), globals=globals_,
                     file_bytes=total, attention_kind="GQA",
                     extra=(("attention.key_length", head_dim),))


def toy_hw(vram_gib: float = 24, ram_gib: float = 64, gpu_bw: float = 1000e9, dram_bw: float = 80e9,
           cores: int = 16, nodes: int = 1, gpu_node: int = 0, h2d: float = 25e9) -> HardwareProfile:
    """A machine with measured round figures (achievable 1.0)."""
    per = cores // nodes
    numa = tuple(NumaNode(id=i, cpus=tuple(range(i * per, (i + 1) * per)), n_physical_cores=per,
                          mem_total_bytes=int(ram_gib * GIB / nodes),
                          dram_read_bytes_per_s=Figure(dram_bw / nodes, "measured"),
                          distances=tuple(10 if j == i else 21 for j in range(nodes)))
                 for i in range(nodes))
    return HardwareProfile(
        name="toy machine",
        gpus=(Gpu(0, "toy GPU", int(vram_gib * GIB), mem_bw_bytes_per_s=Figure(gpu_bw, "measured"),
                  fp16_flop_per_s=Figure(100e12, "measured"), h2d_bytes_per_s=Figure(h2d, "measured"),
                  numa_node=gpu_node),),
        # 1 GHz and a measured 100 GFLOP/s per core keep the CPU rates round:
        # dot = weights/cycle x 1e9 per core, matmul = cpu_mm_eff x 1e11 per core
        cpu=Cpu(model="toy CPU", n_sockets=nodes, n_cores=cores, n_threads=cores, isa=("avx2",),
                base_clock_hz=1e9, core_flop_per_s=Figure(1e11, "measured")),
        numa_nodes=numa, system=System(ram_total_bytes=int(ram_gib * GIB)))


def unit_priors(**kw) -> BackendPriors:
    """Priors with factors of 1 and no fixed costs, so times are bytes / bandwidth."""
    base = dict(name="llama.cpp", eta_gpu=1.0, eta_cpu=1.0, rho_remote=0.5, core_read_share=100.0,
                cpu_dot_weights_per_cycle=1000.0, type_cost={"F16": 1.0}, s_sync_s=0.0, s_barrier_s_per_thread=0.0,
                n_cpu_ops_per_layer=0, s_layer_gpu_s=0.0, t_token_s=0.0, pi_h2d=1.0, gpu_mfu=1.0,
                cpu_mm_eff={"avx2": 1.0}, op_offload="mainline", zipf_s=0.0)
    base.update(kw)
    return BackendPriors(**base)
