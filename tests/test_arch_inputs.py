"""Malformed model inputs that used to load (issue 32 item 9): each is refused by every
command that reads a model with the one `error:` line, a `hint:` and exit 3 (a model file or
folder that cannot be used, moeplan/errors.py ModelFormatError).

  - a string `general.alignment` in a GGUF written by the `gguf` package;
  - `embedding_length` 0 (every width and head size derives from it);
  - `expert_used_count` 0 in a GGUF, `num_experts_per_tok` 0 (or the architecture's own name
    for it, e.g. ERNIE-4.5's moe_k) in a Hugging Face config: a MoE routes each token to at
    least one expert; 0 planned a model whose experts are never read.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from arch_fixtures import write_sparse_hf_folder
from gguf import GGUFWriter
from gguf_fixtures import write_qwen3moe
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import ModelFormatError
from moeplan.probes.gguf_model import read_gguf_model
from moeplan.probes.hf import read_hf_model
from moeplan.profiles.model_profiles import find_profile, load_profile, profile_config

RUN = CliRunner()
HW = "desktop-4090-ddr5"


def _refused(path: Path, words: str) -> None:
    """Every command that reads the model prints one error line naming the field, a hint,
    and exits 3."""
    for cmd in (["inspect", str(path)], ["estimate", str(path), "--hw", HW], ["tune", str(path), "--hw", HW]):
        out = RUN.invoke(app, cmd)
        assert out.exit_code == 3, (cmd, out.output)
        errors = [ln for ln in out.output.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and words in errors[0], out.output
        assert any(ln.startswith("hint:") and len(ln) > len("hint: ") for ln in out.output.splitlines()), out.output
        assert "Traceback" not in out.output


def test_a_string_alignment_written_by_the_gguf_package_is_refused(tmp_path, monkeypatch):
    orig = GGUFWriter.add_name

    def add_name(self, name):
        orig(self, name)
        self.add_string("general.alignment", "32")

    monkeypatch.setattr(GGUFWriter, "add_name", add_name)
    path, _ = write_qwen3moe(tmp_path / "align.gguf")
    monkeypatch.undo()
    with pytest.raises(ModelFormatError, match="general.alignment = '32' is not a power of two"):
        read_gguf_model(path)
    _refused(path, "general.alignment")


def test_zero_embedding_length_is_refused(tmp_path):
    path, _ = write_qwen3moe(tmp_path / "embd0.gguf", n_embd=0)
    with pytest.raises(ModelFormatError, match=r"qwen3moe\.embedding_length = 0 is below the minimum 1"):
        read_gguf_model(path)
    _refused(path, "qwen3moe.embedding_length = 0")


def test_zero_experts_per_token_in_a_gguf_is_refused(tmp_path):
    path, _ = write_qwen3moe(tmp_path / "used0.gguf", n_used=0)
    with pytest.raises(ModelFormatError, match=r"qwen3moe\.expert_used_count = 0 with 8 experts"):
        read_gguf_model(path)
    _refused(path, "qwen3moe.expert_used_count = 0")


@pytest.mark.parametrize("profile,key", [("qwen3-30b-a3b", "num_experts_per_tok"), ("ernie-4.5-21b-a3b", "moe_k"),
                                         ("step-3.5-flash", "moe_top_k"), ("hunyuan-a13b", "moe_topk")])
def test_zero_experts_per_token_in_a_config_is_refused(tmp_path, profile, key):
    """Under the architecture's own name for the fact (its record's HfKeys), a per-layer list
    entry by entry."""
    cfg = dict(profile_config(find_profile(profile)))
    cfg[key] = [0] * len(cfg[key]) if isinstance(cfg[key], list) else 0
    write_sparse_hf_folder(tmp_path / "hf", cfg, load_profile(profile, "Q4_K_M"))
    with pytest.raises(ModelFormatError, match=rf"{key}(\[0\])? = 0"):
        read_hf_model(tmp_path / "hf")
    _refused(tmp_path / "hf", f"{key}")


def test_zero_hidden_size_in_a_config_is_refused(tmp_path):
    cfg = dict(profile_config(find_profile("ernie-4.5-21b-a3b")), hidden_size=0)
    write_sparse_hf_folder(tmp_path / "hf", cfg, load_profile("ernie-4.5-21b-a3b", "Q4_K_M"))
    _refused(tmp_path / "hf", "hidden_size = 0 is below the minimum 1")


def test_a_per_layer_list_that_differs_between_layers_is_refused(tmp_path):
    cfg = dict(profile_config(find_profile("hunyuan-a13b")))
    cfg["moe_intermediate_size"] = [3072] * 31 + [1536]
    write_sparse_hf_folder(tmp_path / "hf", cfg, load_profile("hunyuan-a13b", "Q4_K_M"))
    with pytest.raises(ModelFormatError, match="moe_intermediate_size = .* differs between layers") as e:
        read_hf_model(tmp_path / "hf")
    assert "converter" in e.value.hint
    (tmp_path / "hf" / "config.json").write_text(json.dumps(dict(cfg, moe_intermediate_size=[3072] * 32)))
    assert read_hf_model(tmp_path / "hf").n_ff_exp == 3072


def test_a_moe_gguf_without_experts_per_token_is_refused(tmp_path):
    """llama-model.cpp load_hparams asserts n_expert_used_max > 0 when n_expert > 0: a GGUF
    whose expert_used_count key is missing does not load in llama.cpp either."""
    from gguf_raw import header_of, write_raw

    path, _ = write_qwen3moe(tmp_path / "full.gguf")
    g = header_of(path)
    g.kv = [kv for kv in g.kv if kv[0] != "qwen3moe.expert_used_count"]
    raw = write_raw(tmp_path / "no-used.gguf", g)
    with pytest.raises(ModelFormatError, match=r"qwen3moe\.expert_used_count missing with 8 experts"):
        read_gguf_model(raw)
    _refused(raw, "qwen3moe.expert_used_count missing")
