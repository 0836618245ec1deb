"""Routing sources: uniform, Zipf, recorded traces (format, errors, record -> replay)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf_fixtures import write_qwen3moe
from test_executor_support import FREE

from moeplan.errors import InputError
from moeplan.executor.build import ExecOptions
from moeplan.executor.routing import Trace, make_routing, parse_routing, read_trace, write_trace
from moeplan.executor.run import RunSpec, run_bench
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model


def test_parse_routing():
    assert parse_routing("uniform").mode == "uniform"
    assert parse_routing("zipf:1.2").zipf_s == 1.2
    assert parse_routing("zipf").zipf_s == 1.0
    assert parse_routing("trace:/x/t.json").trace_path == "/x/t.json"
    assert parse_routing("router").label == "router"
    for bad in ("zipf:abc", "zipf:-1", "trace:", "banana"):
        with pytest.raises(InputError):
            parse_routing(bad)


def _top_share(ids: np.ndarray, n: int) -> float:
    counts = np.bincount(ids.reshape(-1), minlength=n)
    return counts.max() / counts.sum()


def test_uniform_and_zipf_draws():
    r = make_routing(parse_routing("uniform"), 64, 6, seed=1)
    r.prepare((3, 4), 2000)
    ids = r.chosen(3, np.arange(2000))
    assert ids.shape == (2000, 6)
    assert all(len(set(row)) == 6 for row in ids.tolist())  # k distinct experts per token
    assert _top_share(ids, 64) < 1.5 / 64
    assert not np.array_equal(r.chosen(3, np.arange(10)), r.chosen(4, np.arange(10)))
    z = make_routing(parse_routing("zipf:1.2"), 64, 6, seed=1)
    z.prepare((3, 4), 2000)
    zids = z.chosen(3, np.arange(2000))
    assert all(len(set(row)) == 6 for row in zids.tolist())
    assert _top_share(zids, 64) > 3 / 64  # skewed
    # each layer has its own hot experts
    hot3 = np.bincount(zids.reshape(-1), minlength=64).argmax()
    hot4 = np.bincount(z.chosen(4, np.arange(2000)).reshape(-1), minlength=64).argmax()
    assert hot3 != hot4
    # a pure function of (seed, layer, position)
    z2 = make_routing(parse_routing("zipf:1.2"), 64, 6, seed=1)
    z2.prepare((3,), 2000)
    assert np.array_equal(z2.chosen(3, np.arange(50)), zids[:50])


def test_trace_round_trip_and_errors(tmp_path):
    t = Trace(8, 2, (1, 2), np.array([[[0, 1], [2, 3]], [[4, 5], [6, 7]]]), "m")
    p = tmp_path / "t.json"
    write_trace(str(p), t)
    back = read_trace(str(p))
    assert back.layers == (1, 2) and np.array_equal(back.tokens, t.tokens)
    assert [x.name for x in tmp_path.iterdir()] == ["t.json"]  # no temp file left
    bad = tmp_path / "bad.json"
    for doc, msg in (({"format": "x"}, "not a moeplan routing trace"),
                     ({**json.loads(p.read_text()), "tokens": [[[0, 9], [1, 2]]]}, "outside"),
                     ({**json.loads(p.read_text()), "tokens": [[[0, 1]]]}, "tokens must be")):
        bad.write_text(json.dumps(doc))
        with pytest.raises(InputError, match=msg):
            read_trace(str(bad))
    bad.write_text("{not json")
    with pytest.raises(InputError, match="cannot read"):
        read_trace(str(bad))
    with pytest.raises(InputError, match="no such"):
        read_trace(str(tmp_path / "missing.json"))
    r = make_routing(parse_routing(f"trace:{p}"), 8, 2, 0)
    with pytest.raises(InputError, match="no entries for block 5"):
        r.prepare((5,), 2)
    r.prepare((1, 2), 5)
    assert "wraps around" in r.notes[0]
    assert r.chosen(2, np.array([0, 2])).tolist() == [[2, 3], [2, 3]]
    with pytest.raises(InputError, match="top-2"):
        make_routing(parse_routing(f"trace:{p}"), 16, 2, 0).prepare((1,), 1)


def test_record_then_replay_gives_the_same_run(tmp_path):
    model = read_gguf_model(write_qwen3moe(tmp_path / "q.gguf")[0])
    p = Placement(cpu_moe_layers=model.moe_layer_indices[:2], n_ctx=256, n_ubatch=16, n_threads=1,
                  gpu_expert_cache_bytes=0)
    opt = ExecOptions(dtype="fp32", cache_experts=3)
    trace = tmp_path / "rec.json"
    a = run_bench(model, p, opt, RunSpec(16, 12, 2, parse_routing("router"), str(trace)), free_bytes=FREE)
    t = read_trace(str(trace))
    assert t.layers == model.moe_layer_indices and t.tokens.shape == (16 + 2 + 12, 4, 2)
    b = run_bench(model, p, opt, RunSpec(16, 12, 2, parse_routing(f"trace:{trace}")), free_bytes=FREE)
    assert a["cache"] == b["cache"]  # same expert choices -> same cache history
    assert a["bytes_per_token_by_tier"] == b["bytes_per_token_by_tier"]
    with pytest.raises(InputError, match="router"):
        run_bench(model, p, opt, RunSpec(4, 2, 0, parse_routing("uniform"), str(trace)), free_bytes=FREE)
