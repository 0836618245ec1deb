"""GGUF reading: exact bytes from tiny files written with gguf.GGUFWriter."""
from __future__ import annotations

import pytest
from gguf_fixtures import nbytes, split_gguf, write_deepseek2, write_gptoss, write_qwen3moe

from moeplan.errors import ModelFormatError
from moeplan.planner.memory.accounting import kv_cache_bytes
from moeplan.probes.gguf_model import read_gguf_model


def _sum(written):
    return sum(nbytes(shape, q) for _, shape, q in written)


def test_qwen3moe_bytes_and_kv(tmp_path):
    path, written = write_qwen3moe(tmp_path / "q.gguf")
    m = read_gguf_model(path)
    assert m.arch == "qwen3moe" and m.quant == "Q8_0"
    assert m.tensor_bytes == _sum(written)
    experts = sum(nbytes(s, q) for n, s, q in written if "_exps." in n)
    assert m.expert_bytes == experts
    assert [layer.kind for layer in m.layers] == ["moe"] * 4
    # GQA: 2 kv heads x 16 dims, K and V, f16 = 2*32*2 = 128 B/token/layer, 4 layers, 4096 cells
    assert kv_cache_bytes(m, 4096) == 128 * 4 * 4096
    # llama.cpp pads n_ctx to 256: 4000 -> 4096 cells
    assert kv_cache_bytes(m, 4000) == kv_cache_bytes(m, 4096)
    assert m.file_bytes > m.tensor_bytes  # header and alignment padding


def test_deepseek2_mla_dense_lead_shared_nextn(tmp_path):
    path, written = write_deepseek2(tmp_path / "d.gguf", nextn=1)
    m = read_gguf_model(path)
    assert [layer.kind for layer in m.layers] == ["dense", "moe", "moe", "moe", "nextn"]
    assert m.n_layers == 4 and m.moe_layer_indices == (1, 2, 3)
    assert m.tensor_bytes == _sum(written)
    # NextN block is in the file but llama.cpp skips it (TENSOR_SKIP)
    nextn = sum(nbytes(s, q) for n, s, q in written if n.startswith("blk.4."))
    assert m.loaded_bytes == m.tensor_bytes - nextn
    shared = sum(nbytes(s, q) for n, s, q in written if "shexp" in n and not n.startswith("blk.4."))
    assert m.bytes_by_group()["shared"] == shared
    # MLA: K-only latent of kv_lora 32 + rope 32 = 64 elements, f16, 4 trunk layers
    assert kv_cache_bytes(m, 4096) == 64 * 2 * 4 * 4096
    assert all(layer.attention == "mla" for layer in m.trunk_layers)
    assert m.mla


def test_gptoss_swa_and_expert_biases(tmp_path):
    path, written = write_gptoss(tmp_path / "g.gguf")
    m = read_gguf_model(path)
    assert [layer.attention for layer in m.layers] == ["swa", "full", "swa", "full"]
    biases = sum(nbytes(s, q) for n, s, q in written if "_exps.bias" in n)
    assert m.bytes_by_group()["expert_aux"] == biases
    weights = sum(nbytes(s, q) for n, s, q in written if "_exps.weight" in n)
    assert m.expert_bytes == weights
    # full layers: 4096 cells; SWA layers: pad256(128*1 + 512) = 768 cells; 2*16*2 bytes*2 (K+V)
    row = 2 * 16 * 2 * 2
    assert kv_cache_bytes(m, 4096, n_ubatch=512) == 2 * row * 4096 + 2 * row * 768


def test_split_set_any_shard(tmp_path):
    paths, written = split_gguf(write_qwen3moe, tmp_path, 3)
    for p in paths:
        m = read_gguf_model(p)
        assert m.tensor_bytes == _sum(written)
        assert len(m.shards) == 3
        assert m.file_bytes == sum(x.stat().st_size for x in paths)


def test_missing_shard(tmp_path):
    paths, _ = split_gguf(write_qwen3moe, tmp_path, 3)
    paths[2].unlink()
    with pytest.raises(ModelFormatError, match="missing"):
        read_gguf_model(paths[0])


def test_truncated_file(tmp_path):
    path, _ = write_qwen3moe(tmp_path / "q.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ModelFormatError, match="truncated"):
        read_gguf_model(path)
    path.write_bytes(data[:200])
    with pytest.raises(ModelFormatError, match="truncated"):
        read_gguf_model(path)


def test_not_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelFormatError, match="not a GGUF"):
        read_gguf_model(p)


def test_unknown_arch_and_dense(tmp_path):
    import numpy as np
    from gguf import GGUFWriter

    p = tmp_path / "dense.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_head_count(4)
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((8, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFormatError, match="dense model"):
        read_gguf_model(p)
    p2 = tmp_path / "rwkv.gguf"
    w = GGUFWriter(str(p2), "rwkv6")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFormatError, match="not supported"):
        read_gguf_model(p2)
