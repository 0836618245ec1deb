"""Hugging Face folders: exact bytes from safetensors headers, name mapping, bad folders."""
from __future__ import annotations

import json
import struct

import pytest
from hf_fixtures import (
    DEEPSEEK_TINY,
    GPT_OSS_TINY,
    QWEN35_TINY,
    deepseek_fp8_tensors,
    gpt_oss_tensors,
    nbytes,
    qwen35_tensors,
    write_hf_folder,
)
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import ModelFormatError
from moeplan.planner.memory.accounting import kv_bytes_per_token
from moeplan.probes.hf import read_hf_model
from moeplan.profiles.model_profiles import spec_from_profile


def total(tensors) -> int:
    return sum(nbytes(*v) for v in tensors.values())


def by_name(m):
    return {t.name: t for t in m.tensors}


def test_deepseek_fp8_folder_bytes_scales_and_mtp(tmp_path):
    ts = deepseek_fp8_tensors()
    m = read_hf_model(write_hf_folder(tmp_path / "ds", DEEPSEEK_TINY, ts))
    assert m.arch == "deepseek2" and m.source == "hf" and m.quant == "native (BF16, F8_E4M3)"
    assert m.tensor_bytes == total(ts)  # every byte of every safetensors header, scales included
    assert [layer.kind for layer in m.layers] == ["dense", "moe", "moe", "nextn"]
    t = by_name(m)
    # 4 experts x (gate, up: 128x256 FP8 + 1x2 f32 scales) summed into one GGUF tensor per layer
    assert t["blk.1.ffn_gate_exps.weight"].shape == (256, 128, 4)
    assert t["blk.1.ffn_gate_exps.weight"].n_bytes == 4 * (128 * 256 + 1 * 2 * 4)
    assert t["blk.1.attn_kv_b.weight"].n_bytes == 512 * 128 + 4 * 1 * 4
    assert "blk.3.nextn.shared_head_head.weight" in t and m.layers[3].kind == "nextn"
    assert t["blk.1.exp_probs_b.bias"].group == "router"
    # the MTP block is loaded by nobody: expert bytes count the trunk only
    assert m.expert_bytes == sum(nbytes(*v) for k, v in ts.items() if ".experts." in k and "layers.3." not in k)
    assert kv_bytes_per_token(m) == 3 * (128 + 32) * 2  # MLA latent, trunk blocks only


def test_profile_native_recipe_equals_the_checkpoint(tmp_path):
    """The same config through a profile (synthesised index, native dtypes) and through the
    folder (real headers) gives the same bytes, layer by layer."""
    ts = deepseek_fp8_tensors()
    hf = read_hf_model(write_hf_folder(tmp_path / "ds", DEEPSEEK_TINY, ts))
    prof = {"name": "tiny", "config": DEEPSEEK_TINY, "native": {"scheme": "fp8_block128"},
            "conversion": {"mtp_tensors": ["eh_proj", "enorm", "hnorm", "shared_head_norm", "embed_tokens",
                                           "shared_head_head"]}}
    syn = spec_from_profile(prof, "native", None)
    assert [layer.n_bytes for layer in syn.layers] == [layer.n_bytes for layer in hf.layers]
    assert [layer.expert_bytes for layer in syn.layers] == [layer.expert_bytes for layer in hf.layers]
    assert syn.tensor_bytes == hf.tensor_bytes


def test_gpt_oss_mxfp4_blocks_and_scales(tmp_path):
    ts = gpt_oss_tensors()
    m = read_hf_model(write_hf_folder(tmp_path / "go", GPT_OSS_TINY, ts, n_shards=3))
    assert m.tensor_bytes == total(ts) and len(m.shards) == 3
    t = by_name(m)
    gu = t["blk.0.ffn_gate_up_exps.weight"]
    assert (gu.group, gu.ggml_type, gu.shape) == ("experts", "MXFP4", (128, 128, 4))
    assert gu.n_bytes == 4 * 128 * (128 // 32) * 17  # 16 bytes of FP4 + 1 scale byte per 32
    assert t["blk.0.ffn_gate_up_exps.bias"].group == "expert_aux"
    assert [layer.attention for layer in m.layers] == ["swa", "full"]
    spec = spec_from_profile({"name": "tiny", "config": GPT_OSS_TINY, "native": {"scheme": "gpt_oss"},
                              "conversion": {"keeps": "mxfp4"}}, "native", None)
    assert spec.expert_bytes == m.expert_bytes and spec.tensor_bytes == m.tensor_bytes


def test_qwen35_container_text_config_mtp_and_vision(tmp_path):
    ts = qwen35_tensors()
    m = read_hf_model(write_hf_folder(tmp_path / "q", QWEN35_TINY, ts, index=False))
    assert m.arch == "qwen35moe" and m.tensor_bytes == total(ts)
    assert [layer.attention for layer in m.layers] == ["recurrent"] * 3 + ["full", "skipped"]
    t = by_name(m)
    assert t["blk.4.nextn.eh_proj.weight"].shape == (256, 128)  # mtp.fc -> NextN block 4
    assert t["blk.4.ffn_gate_up_exps.weight"].group == "experts"
    vision = t["model.visual.blocks.0.attn.qkv.weight"]
    assert vision.layer is None and vision.group == "other"  # kept, so the totals stay exact
    assert m.n_experts == 8 and m.n_experts_used == 2


def test_inspect_hf_folder_via_cli(tmp_path):
    ts = deepseek_fp8_tensors()
    folder = write_hf_folder(tmp_path / "ds", DEEPSEEK_TINY, ts)
    res = CliRunner().invoke(app, ["inspect", str(folder), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["totals"]["tensor_bytes"] == total(ts)
    assert data["totals"]["file_bytes"] == sum(p.stat().st_size for p in folder.glob("*.safetensors"))


# ---- bad folders ---------------------------------------------------------------------------

def _bad(folder, match):
    with pytest.raises(ModelFormatError, match=match) as err:
        read_hf_model(folder)
    assert err.value.hint
    return err.value


def test_folder_without_config(tmp_path):
    _bad(tmp_path, "no config.json")


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_TINY))
    _bad(tmp_path, "no \\*.safetensors")


def test_unknown_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["FalconForCausalLM"], "model_type": "falcon"}))
    _bad(tmp_path, "not supported")


def test_dense_model(tmp_path):
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert "-ngl" in _bad(tmp_path, "dense model").hint


def test_missing_shard_and_truncated_header(tmp_path):
    ts = gpt_oss_tensors()
    folder = write_hf_folder(tmp_path / "go", GPT_OSS_TINY, ts, n_shards=2)
    shard = sorted(folder.glob("*.safetensors"))[1]
    data = shard.read_bytes()
    shard.unlink()
    _bad(folder, "shards named by the index are missing")
    shard.write_bytes(data[:100])
    _bad(folder, "corrupt safetensors header|truncated")
    shard.write_bytes(struct.pack("<Q", 10) + b"not json!!" + b"\0" * 64)
    _bad(folder, "unreadable safetensors header")


def test_cli_bad_folder_is_one_line_with_hint(tmp_path):
    res = CliRunner().invoke(app, ["inspect", str(tmp_path), "--json"])
    assert res.exit_code == 3
    err = json.loads(res.stdout)["error"]
    assert err["kind"] == "model-format" and err["hint"]


def test_config_missing_a_shape_key(tmp_path):
    cfg = dict(DEEPSEEK_TINY)
    del cfg["qk_rope_head_dim"]
    write_hf_folder(tmp_path / "ds", cfg, deepseek_fp8_tensors())
    _bad(tmp_path / "ds", "missing or bad key")
