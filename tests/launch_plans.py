"""Hand-built Plans for the launch tests (the planner's search is not needed to emit a plan).

Each plan is fixed data: the estimate figures are stated, not predicted, so golden scripts stay
stable whatever the cost model does.
"""
from __future__ import annotations

from pathlib import Path

from gguf_fixtures import write_deepseek2, write_gptoss, write_qwen3moe

from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Estimate, ModelRef, Plan
from moeplan.probes.models import resolve_model

GIB = 1024**3

ESTIMATE = Estimate(
    decode_tok_s=12.5, decode_tok_s_range=(10.0, 15.0), prefill_tok_s=240.0, prefill_tok_s_range=(200.0, 280.0),
    decode_terms=(), prefill_terms=(), bottleneck="cpu-mem", prefill_bottleneck="pcie",
    vram_bytes=18 * GIB, vram_required_bytes=19 * GIB, ram_bytes=140 * GIB, depth=0,
)


def model_ref(m: ModelSpec, path: str | None = None) -> ModelRef:
    return ModelRef(name=m.name, arch=m.arch, source=m.source, path=path if path is not None else m.path,
                    quant=m.quant, digest=m.digest(), file_bytes=m.file_bytes)


def make_plan(m: ModelSpec, placement: Placement, estimate: Estimate = ESTIMATE, path: str | None = None) -> Plan:
    return Plan(model=model_ref(m, path), hardware_name="test-box", hardware_digest="0123456789abcdef",
                placement=placement, estimate=estimate, moeplan_version="test")


def write_models(folder: Path) -> dict[str, ModelSpec]:
    """qwen3moe-like (all MoE), deepseek2-like (2 dense leading blocks, MLA, one NextN block) and
    gpt-oss-like (expert biases), written as GGUF files whose names need quoting."""
    folder.mkdir(parents=True, exist_ok=True)
    q, _ = write_qwen3moe(folder / "qwen moe's \"tiny\".gguf", n_layer=6, head_dim=32)
    d, _ = write_deepseek2(folder / "deep seek $HOME.gguf", n_layer=8, n_dense=2, nextn=1)
    g, _ = write_gptoss(folder / "gpt oss.gguf", n_layer=6)
    return {"qwen3moe": resolve_model(str(q)), "deepseek2": resolve_model(str(d)), "gpt-oss": resolve_model(str(g))}


def _spm_byte_tokenizer(w, n_vocab: int) -> None:
    """An SPM vocabulary with byte fallback, so llama.cpp can tokenize any prompt:
    <unk>, <s>, </s>, the 256 byte tokens, then plain pieces up to n_vocab."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE (gguf TokenType)
    tokens += ["\u2581" * (i + 1) for i in range(n_vocab - len(tokens))]
    types += [1] * (n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


RUNNABLE_VOCAB = 272


def write_runnable(writer, path: Path, **kw):
    """A fixture GGUF llama.cpp can load *and* run: the byte-fallback tokenizer, head_dim 32
    (a q8_0 K cache needs its block size 32 to divide the head size; the deepseek2 writer has
    no head_dim: its latent cache row is kv_lora + rope = 64)."""
    import inspect

    import gguf_fixtures

    if "head_dim" in inspect.signature(writer).parameters:
        kw = {"head_dim": 32, **kw}
    plain = gguf_fixtures._tokenizer
    gguf_fixtures._tokenizer = _spm_byte_tokenizer
    try:
        return writer(path, n_vocab=RUNNABLE_VOCAB, **kw)
    finally:
        gguf_fixtures._tokenizer = plain
