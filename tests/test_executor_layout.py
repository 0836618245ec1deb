"""Layouts: every tensor gets a role and its exact torch shape; gating follows the arch."""
from __future__ import annotations

import subprocess
import sys

from gguf_fixtures import write_deepseek2, write_gptoss, write_qwen3moe
from test_executor_support import write_qwen3next

from moeplan.executor.layout import model_layout, torch_shape
from moeplan.probes.gguf_model import read_gguf_model


def _names(lay) -> set[str]:
    out = {w.name for w in lay.attn.weights.values()} | {w.name for w in lay.ffn.weights.values()}
    out |= {w.name for w in lay.side}
    for w in (lay.attn_norm, lay.ffn_norm):
        if w is not None:
            out.add(w.name)
    if lay.ffn.experts:
        out |= set(lay.ffn.experts.names.values()) | set(lay.ffn.experts.bias_names.values())
    return out


def test_every_tensor_has_one_role_with_its_shape(tmp_path):
    for path in (write_qwen3moe(tmp_path / "q.gguf")[0], write_deepseek2(tmp_path / "d.gguf", nextn=1)[0],
                 write_gptoss(tmp_path / "g.gguf")[0], write_qwen3next(tmp_path / "n.gguf")):
        m = read_gguf_model(path)
        lay = model_layout(m)
        assert [x.index for x in lay.layers] == [x.index for x in m.trunk_layers]  # NextN skipped
        for spec, ll in zip(m.trunk_layers, lay.layers):
            assert _names(ll) == {t.name for t in spec.tensors}
            by = {t.name: t for t in spec.tensors}
            for w in list(ll.attn.weights.values()) + list(ll.ffn.weights.values()) + list(ll.side):
                assert w.shape == torch_shape(by[w.name].shape) and w.file_bytes == by[w.name].n_bytes
            if ll.ffn.experts:
                assert ll.ffn.experts.file_bytes_per_expert * m.n_experts == spec.expert_bytes


def test_attention_kinds_and_gating(tmp_path):
    q = model_layout(read_gguf_model(write_qwen3moe(tmp_path / "q.gguf")[0]))
    a = q.layers[0].attn
    assert (a.kind, a.n_head, a.n_head_kv, a.d_k) == ("gqa", 4, 2, 16)
    assert (q.layers[0].ffn.gating.func, q.layers[0].ffn.gating.norm_weights) == ("softmax", True)

    d = model_layout(read_gguf_model(write_deepseek2(tmp_path / "d.gguf")[0]))
    assert d.layers[0].ffn.kind == "dense" and d.layers[1].ffn.kind == "moe"
    mla = d.layers[1].attn
    assert (mla.kind, mla.kv_lora, mla.d_rope, mla.d_nope, mla.d_v, mla.n_head) == ("mla", 32, 32, 32, 32, 4)
    assert d.layers[1].ffn.gating.func == "sigmoid"  # exp_probs_b present: a V3-style file
    assert "shexp_down" in d.layers[1].ffn.weights

    g = model_layout(read_gguf_model(write_gptoss(tmp_path / "g.gguf", window=128)[0]))
    assert [x.attn.window for x in g.layers] == [128, 0, 128, 0]
    assert "sinks" in g.layers[0].attn.weights
    gate = g.layers[0].ffn.gating
    assert (gate.func, gate.activation) == ("softmax_weight", "swiglu_oai")
    assert set(g.layers[0].ffn.experts.bias_names) == {"gate", "up", "down"}
    assert g.layers[0].ffn_norm.name.endswith("post_attention_norm.weight")

    n = model_layout(read_gguf_model(write_qwen3next(tmp_path / "n.gguf")))
    assert [x.attn.kind for x in n.layers] == ["generic", "generic", "generic", "gqa"]
    assert n.layers[3].attn.gated and n.layers[0].ffn.experts.fused_in_file
    assert "shexp_inp" in n.layers[0].ffn.weights
    assert any("stand-in" in note for note in n.notes)


def test_cli_import_does_not_import_torch():
    code = "import sys, moeplan.cli; import moeplan.commands.bench; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
