"""--no-op-offload priced both ways (issue 33 item 4): the VRAM op offload costs is the staged
copy of one CPU expert tensor (ggml-backend.cpp L1376-1392), and the note tune prints names it
beside the prefill the choice gives up."""
from __future__ import annotations

from moeplan.planner.memory.accounting import MemoryConstants, op_offload_vram_bytes
from moeplan.planner.placement import Placement
from moeplan.profiles.model_profiles import load_profile


def _model():
    return load_profile("qwen3-235b-a22b")


def _p(**kw):
    base = dict(n_ctx=8192, n_ubatch=512, n_batch=2048, n_gpus=1, flash_attn=True, n_threads=8)
    base.update(kw)
    return Placement(**base)


def test_vram_saved_is_the_largest_cpu_expert_tensor():
    m = _model()
    cpu = tuple(m.moe_layer_indices[:12])
    largest = max(t.n_bytes for layer in m.moe_layers if layer.index in cpu
                  for t in layer.tensors if t.group == "experts")
    saved = op_offload_vram_bytes(m, _p(cpu_moe_layers=cpu), MemoryConstants())
    # the staged copy is alive in the MoE phase; the buffer grows by it unless another
    # phase stays larger, so the saving is positive and never more than the copy
    assert 0 < saved <= largest


def test_nothing_saved_without_cpu_experts_or_below_the_offload_batch():
    m = _model()
    assert op_offload_vram_bytes(m, _p()) == 0  # every expert on the GPU: nothing staged
    cpu = tuple(m.moe_layer_indices[:12])
    assert op_offload_vram_bytes(m, _p(cpu_moe_layers=cpu, n_ubatch=16, n_batch=16)) == 0  # < 32 tokens

