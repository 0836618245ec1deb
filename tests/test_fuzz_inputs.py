"""Fuzzing every input kind in-process: GGUF headers, Hugging Face configs, hardware profiles
and plan JSON, ~1,000 mutated cases each (hypothesis, derandomized so CI is repeatable).

Each case runs what the commands run on that input (read the model and estimate a placement;
parse a profile and estimate on it; read a plan and render its launch scripts) and asserts:
no exception other than moeplan's own errors (those become exits 2-6; anything else is exit
1, an internal error), under 5 s per case, and the process's peak resident memory never more
than 500 MB above what it was before the fuzzing (getrusage ru_maxrss: no tracing overhead;
test_gguf_adversarial_headers_are_refused_fast traces the 2^31-element array with tracemalloc).
"""
from __future__ import annotations

import copy
import json
import resource
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf_fixtures import write_qwen3moe
from gguf_raw import (
    T_ARRAY,
    T_BOOL,
    T_F32,
    T_F64,
    T_I32,
    T_I64,
    T_STRING,
    T_U8,
    T_U32,
    T_U64,
    RawGGUF,
    header_of,
    write_raw,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeplan.errors import MoeplanError
from moeplan.planner.cost.estimate import estimate
from moeplan.planner.placement import Placement
from moeplan.profiles.backends import read_priors

CASE_SECONDS = 5.0
CASE_PEAK_BYTES = 500 * 1024 * 1024
FUZZ = settings(max_examples=1000, deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))
PRESET = Path(__file__).resolve().parent.parent / "moeplan" / "profiles" / "hardware" / "desktop-4090-ddr5.json"


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


RSS_BEFORE = _max_rss_bytes()


def run_case(fn: Callable[[], Any]) -> None:
    """Run one case: moeplan's errors are fine, anything else fails the test, as do time and memory."""
    t0 = time.perf_counter()
    try:
        fn()
    except MoeplanError as err:
        assert err.exit_code in (2, 3, 4, 5, 6), err
        assert err.message and "\n" not in err.message, err.message
    elapsed = time.perf_counter() - t0
    grown = _max_rss_bytes() - RSS_BEFORE
    assert elapsed < CASE_SECONDS, f"case took {elapsed:.1f} s"
    assert grown < CASE_PEAK_BYTES, f"peak memory grew by {grown / 2**20:.0f} MiB"


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def profile():
    from moeplan.probes.hwprofile import read_profile

    return read_profile(str(PRESET))


@pytest.fixture(scope="module")
def base_gguf(fuzz_dir) -> tuple[Path, RawGGUF, bytes]:
    path, _ = write_qwen3moe(fuzz_dir / "base.gguf", n_layer=3, n_vocab=64)
    return path, header_of(path), path.read_bytes()


def _estimate(spec, profile) -> None:
    p = Placement(n_ctx=min(4096, spec.n_ctx_train or 4096), n_threads=4,
                  cpu_moe_layers=spec.moe_layer_indices[:1], n_gpus=len(profile.gpus))
    estimate(spec, p, profile, read_priors("llama.cpp"))


# ---- values any field may be given ---------------------------------------------------------------

INTS = st.one_of(st.integers(-3, 70), st.integers(-(2**63), 2**64 - 1),
                 st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63 - 1, 10**9, 10**12, -1]))
SCALARS = st.one_of(INTS, st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.booleans())
JSON_VALUES = st.recursive(st.one_of(st.none(), SCALARS),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=8)
GGUF_VALUES = st.one_of(
    st.tuples(st.sampled_from([T_U8, T_U32, T_I32, T_U64, T_I64]), INTS),
    st.tuples(st.sampled_from([T_F32, T_F64]), st.floats(allow_nan=True, allow_infinity=True, width=32)),
    st.tuples(st.just(T_STRING), st.text(max_size=12)),
    st.tuples(st.just(T_BOOL), st.booleans()),
    st.tuples(st.just(T_ARRAY), st.recursive(st.lists(st.integers(0, 2**31), max_size=4),
                                             lambda inner: st.lists(inner, min_size=1, max_size=2), max_leaves=12)),
)


# ---- GGUF headers ------------------------------------------------------------------------------

def _read_and_estimate(path: Path, profile) -> None:
    from moeplan.probes.models import resolve_model

    spec = resolve_model(str(path))
    _estimate(spec, profile)


@settings(FUZZ, max_examples=400)
@given(data=st.data())
def test_fuzz_gguf_metadata_values(base_gguf, fuzz_dir, profile, data):
    """400 cases: a key's value replaced by any type and size (or a new key, or a key dropped)."""
    _, header, _ = base_gguf
    g = copy.deepcopy(header)
    keys = [k for k, _, _ in g.kv]
    key = data.draw(st.one_of(st.sampled_from(keys), st.sampled_from(
        ["qwen3moe.block_count", "qwen3moe.expert_used_count", "qwen3moe.expert_count", "general.alignment",
         "split.count", "qwen3moe.context_length", "qwen3moe.attention.head_count_kv", "x.nested"])))
    if data.draw(st.integers(0, 9)) == 0:
        g.kv = [kv for kv in g.kv if kv[0] != key]
    else:
        vtype, value = data.draw(GGUF_VALUES)
        g.set(key, vtype, value)
    path = write_raw(fuzz_dir / "value.gguf", g)
    run_case(lambda: _read_and_estimate(path, profile))


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_fuzz_gguf_tensor_infos(base_gguf, fuzz_dir, profile, data):
    """300 cases: a tensor's shape, type or offset replaced (absurd dims, unknown types)."""
    _, header, _ = base_gguf
    g = copy.deepcopy(header)
    t = g.tensors[data.draw(st.integers(0, len(g.tensors) - 1))]
    what = data.draw(st.sampled_from(["shape", "dim", "type", "offset"]))
    if what == "shape":
        t.shape = data.draw(st.lists(st.integers(0, 2**64 - 1), max_size=10))
    elif what == "dim" and t.shape:
        t.shape[data.draw(st.integers(0, len(t.shape) - 1))] = data.draw(INTS)
    elif what == "type":
        t.type_id = data.draw(st.integers(0, 2**32 - 1))
    else:
        t.offset = data.draw(INTS)
    path = write_raw(fuzz_dir / "tensor.gguf", g)
    run_case(lambda: _read_and_estimate(path, profile))


@settings(FUZZ, max_examples=300)
@given(data=st.data())
def test_fuzz_gguf_header_bytes(base_gguf, fuzz_dir, profile, data):
    """300 cases: bytes of the header overwritten (counts, lengths, type ids), or the file cut."""
    _, header, raw = base_gguf
    end = len(raw) - header.data_bytes
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, end - 1))
        if data.draw(st.booleans()):
            b[pos:pos + 8] = struct.pack("<Q", data.draw(st.integers(0, 2**64 - 1)))
        else:
            b[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.integers(0, 4)) == 0:
        b = b[:data.draw(st.integers(0, len(b)))]
    path = fuzz_dir / "bytes.gguf"
    path.write_bytes(bytes(b[:len(raw)]))
    run_case(lambda: _read_and_estimate(path, profile))


def test_gguf_adversarial_headers_are_refused_fast(base_gguf, fuzz_dir, profile):
    """The cases of issue 13: a 2^31-element array, nested arrays, block_count 10^9, a string
    alignment, used > experts and absurd dims each exit 3 with the field named."""
    _, header, _ = base_gguf

    def raising(edit) -> MoeplanError:
        g = copy.deepcopy(header)
        edit(g)
        path = write_raw(fuzz_dir / "adv.gguf", g)
        from moeplan.probes.models import resolve_model

        t0 = time.perf_counter()
        with pytest.raises(MoeplanError) as exc:
            resolve_model(str(path))
        assert time.perf_counter() - t0 < CASE_SECONDS
        assert exc.value.exit_code == 3
        return exc.value

    assert "block_count = 1000000000 is above the limit 1000" in raising(
        lambda g: g.set("qwen3moe.block_count", T_U64, 10**9)).message
    assert "expert_used_count = 1000 is above" in raising(
        lambda g: g.set("qwen3moe.expert_used_count", T_U32, 1000)).message
    assert "general.alignment" in raising(lambda g: g.set("general.alignment", T_STRING, "32")).message
    assert "nested" in raising(lambda g: g.set("x.n", T_ARRAY, [[[[[[[1]]]]]]])).message
    err = raising(lambda g: setattr(g.tensors[0], "shape", [2**40, 2**20]))
    assert "corrupt" in err.message and "download" not in err.hint.split(";")[0]
    # a 2^31-element u64 array: refused from its count, not by reading 16 GiB
    g = copy.deepcopy(header)
    g.set("zz.big", T_ARRAY, [7])
    path = write_raw(fuzz_dir / "big.gguf", g)
    b = bytearray(path.read_bytes())
    at = b.find(b"zz.big") + len("zz.big") + 4  # key, then the value type
    b[at:at + 12] = struct.pack("<IQ", T_U64, 2**31)
    path.write_bytes(bytes(b))
    from moeplan.probes.models import resolve_model

    tracemalloc.start()
    try:
        with pytest.raises(MoeplanError) as exc:
            resolve_model(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "array of 2,147,483,648 items" in exc.value.message
    assert peak < 64 * 2**20


# ---- Hugging Face configs ----------------------------------------------------------------------

HF_KEYS = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_local_experts", "num_experts_per_tok",
           "num_attention_heads", "num_key_value_heads", "head_dim", "sliding_window", "vocab_size",
           "max_position_embeddings", "architectures", "model_type", "text_config", "layer_types",
           "rope_scaling", "quantization_config", "tie_word_embeddings"]


@pytest.fixture(scope="module")
def base_hf(fuzz_dir) -> tuple[Path, dict]:
    from hf_fixtures import GPT_OSS_TINY, gpt_oss_tensors, write_hf_folder

    folder = write_hf_folder(fuzz_dir / "hf", GPT_OSS_TINY, gpt_oss_tensors(GPT_OSS_TINY), n_shards=1)
    return folder, dict(GPT_OSS_TINY)


@settings(FUZZ, max_examples=1000)
@given(data=st.data())
def test_fuzz_hf_config(base_hf, profile, data):
    """1,000 cases: config.json keys replaced by any JSON value, dropped, or the file itself junk."""
    folder, base = base_hf
    cfg = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.one_of(st.sampled_from(HF_KEYS), st.sampled_from(sorted(base))))
        if data.draw(st.integers(0, 9)) == 0:
            cfg.pop(key, None)
        else:
            cfg[key] = data.draw(JSON_VALUES)
    text = json.dumps(cfg) if data.draw(st.integers(0, 19)) else data.draw(st.text(max_size=40))
    (folder / "config.json").write_text(text)
    run_case(lambda: _read_and_estimate(folder, profile))


# ---- JSON documents: hardware profiles and plans ------------------------------------------------

def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(doc: Any, data) -> Any:
    """Replace one value anywhere in `doc` (or drop it) with any JSON value; 1-3 times."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if data.draw(st.integers(0, 9)) == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JSON_VALUES)
    return doc


@settings(FUZZ, max_examples=1000)
@given(data=st.data())
def test_fuzz_hardware_profile(profile, tiny_spec, data):
    """1,000 cases: a preset profile with values replaced anywhere; parse it, then estimate on it."""
    from moeplan.probes.hwprofile import parse_profile

    doc = _mutate(json.loads(PRESET.read_text()), data)
    run_case(lambda: _estimate(tiny_spec, parse_profile(doc, "hw.json")))


@pytest.fixture(scope="module")
def tiny_spec(base_gguf):
    from moeplan.probes.models import resolve_model

    return resolve_model(str(base_gguf[0]))


@pytest.fixture(scope="module")
def base_plan(tiny_spec, profile) -> dict:
    from moeplan.planner.search import Request, build_plan, choose_plan

    result = choose_plan(tiny_spec, profile, read_priors("llama.cpp"), Request())
    return build_plan(tiny_spec, profile, result, "decode", "", moeplan_version="test").to_dict()


@settings(FUZZ, max_examples=1000)
@given(data=st.data())
def test_fuzz_plan_json(base_plan, tiny_spec, data):
    """1,000 cases: a plan with values replaced anywhere (or wrapped as `tune --json` prints it);
    read it as emit does and render its launch files."""
    from moeplan.launch import emit_launch, release_programs, render_files
    from moeplan.planner.limits import check_placement
    from moeplan.planner.plan import plan_from_doc

    doc = _mutate(base_plan, data)
    if data.draw(st.booleans()):
        doc = {"moeplan_version": "0.1.0", "plan": doc}

    def case() -> None:
        plan = plan_from_doc(doc, "plan.json")
        check_placement(plan.placement, where="plan.json", model=tiny_spec)
        backend = plan.placement.backend
        launch = emit_launch(plan, tiny_spec, backend, release_programs(backend))
        render_files(plan, tiny_spec, launch)

    run_case(case)
