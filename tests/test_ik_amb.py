"""ik_llama.cpp's -amb (cparams.attn_max_batch, MiB) in the compute buffer: MLA's K*Q without
flash attention computed in head chunks (src/graphs/build_deepseek2.cpp at 8337e4cd3,
L1089-1140), priced by hand from that source here."""
from __future__ import annotations

import pytest
from launch_plans import make_plan

from moeplan.launch import emit_launch
from moeplan.planner.memory import compute_buffer as cb
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement
from moeplan.profiles.model_profiles import load_profile
from moeplan.units import MIB

MODEL = load_profile("deepseek-v3")  # 128 heads, kv_lora_rank 512, rope 64


def _ik(amb: int | None, backend: str = "ik_llama.cpp") -> Placement:
    return Placement(backend=backend, n_ctx=163840, n_ubatch=1024, n_batch=2048, flash_attn=False,
                     options=PlanOptions(amb=amb))


def _attention(p: Placement) -> dict[str, int]:
    return cb.attention_bytes(MODEL, p, cb.reserve_shape(p))


def test_model_geometry_the_hand_figures_assume():
    assert MODEL.n_head == 128
    a = cb._attention_layers(MODEL, _ik(None), cb.reserve_shape(_ik(None)))[0]
    assert (a["kind"], a["n_kv"], a["kv_lora"], a["rope"]) == ("mla", 163840, 512, 64)


def test_amb_1024_splits_kq_into_chunks_of_two_heads():
    """kq_size = 163840 * 1024 * 128 * 4 B = 81920 MiB > 1024: n_step = min(ceil(81920 / 1024),
    128) = 80, n_per_step = ceil(128 / 80) = 2; one chunk's K*Q is 163840 x 1024 x 2 f32 =
    1280 MiB, and the concatenated latent output of all 128 heads 512 x 1024 x 128 f32 = 256 MiB."""
    assert cb.ik_kq_heads(163840, 1024, 128, 1024) == 2
    t = _attention(_ik(1024))
    assert t["kq"] == 1280 * MIB
    assert t["kqv_compressed"] == 256 * MIB


def test_default_amb_is_256_one_head_per_chunk():
    """-amb unset: common.h's 256 MiB; n_step = min(320, 128) = 128, one head per chunk."""
    assert cb.ik_amb_mib(_ik(None)) == 256
    assert cb.ik_kq_heads(163840, 1024, 128, 256) == 1
    assert _attention(_ik(None))["kq"] == 640 * MIB


def test_small_amb_is_raised_to_128_and_zero_turns_splitting_off():
    assert cb.ik_amb_mib(_ik(100)) == 128  # common.cpp:1967-1970
    full = 163840 * 1024 * 128 * 4
    t = _attention(_ik(0))
    assert t["kq"] == full and "kqv_compressed" not in t


def test_amb_at_or_above_kq_size_keeps_one_kq():
    """attn_max_batch >= kq_size: one K*Q of every head (L1090)."""
    assert cb.ik_kq_heads(4096, 512, 128, 1024) == 128  # 4096 * 512 * 128 * 4 B = 1024 MiB
    assert cb.ik_kq_heads(4096, 512, 128, 1023) == 64  # n_step 2


def test_mainline_llama_cpp_has_no_amb():
    t = _attention(_ik(1024, backend="llama.cpp"))
    assert t["kq"] == 163840 * 1024 * 128 * 4 and "kqv_compressed" not in t


@pytest.mark.parametrize("script", ["launch.sh", "bench.sh"])
def test_plan_with_amb_emits_it(script):
    p = Placement(backend="ik_llama.cpp", n_ctx=8192)
    argv = emit_launch(make_plan(MODEL, p.with_(options=PlanOptions(amb=1024))), MODEL,
                       "ik_llama.cpp").script(script).command.argv
    assert argv[argv.index("-amb") + 1] == "1024"
    assert "-amb" not in emit_launch(make_plan(MODEL, p), MODEL, "ik_llama.cpp").script(script).command.argv


def test_a_builds_sched_max_copies_replaces_the_runtimes():
    """ik_llama.cpp built GGML_SCHED_MAX_COPIES 4 before #751 (ggml/CMakeLists.txt:106 at
    e787c0014) and 1 since: a plan for such a build keeps 3 more copies of each device's split
    inputs under pipeline parallelism (every layer offloaded on several GPUs)."""
    p = _ik(1024).with_(n_gpus=15)
    assert cb.pipeline_copies(MODEL, p) == 1
    old = p.with_(options=p.options.with_(sched_max_copies=4))
    assert cb.pipeline_copies(MODEL, old) == 4
    inputs = cb.pipeline_copy_terms(MODEL, old, device=True)
    assert inputs["kq_mask"] == 163840 * 1024 * 4  # f32 without flash attention
