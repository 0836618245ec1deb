"""GPU expert cache: the executor's hit accounting equals an independent replay of the trace."""
from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
import torch
from gguf_fixtures import write_qwen3moe
from test_executor_support import FREE

from moeplan.executor.build import ExecOptions
from moeplan.executor.cache import CPU, HIT, UPLOAD, ExpertCache
from moeplan.executor.routing import RoutingSpec
from moeplan.executor.run import RunSpec, run_bench
from moeplan.planner.placement import Placement
from moeplan.probes.gguf_model import read_gguf_model

torch.set_num_threads(1)


def replay(trace: np.ndarray, layers: list[int], positions: range, n_slots: int, policy: str, share: float,
           count_from: int) -> dict:
    """Written from the cache's documented rules, independently of cache.py: per token, per
    CPU block in order, experts in increasing id order; a share of misses is uploaded (an
    accumulator crossing 1); victims never belong to the current token; lfu keeps counts of
    every use and does not admit an expert used less often than its victim."""
    resident: OrderedDict = OrderedDict()  # key -> None, least recent first
    uses: dict = {}
    acc = 0.0
    hits = misses = uploads = 0
    for pos in positions:
        for li, layer in enumerate(layers):
            busy = set()
            for e in sorted(set(trace[pos, li].tolist())):
                key = (layer, e)
                uses[key] = uses.get(key, 0) + 1
                counted = pos >= count_from
                if key in resident:
                    resident.move_to_end(key)
                    busy.add(key)
                    hits += counted
                    continue
                misses += counted
                acc += share
                if acc < 1.0 - 1e-9:
                    continue
                acc -= 1.0
                if len(resident) >= n_slots:
                    cands = [k for k in resident if k not in busy]  # resident is in LRU order
                    if not cands:
                        continue
                    if policy == "lru":
                        victim = cands[0]
                    else:
                        order = {k: i for i, k in enumerate(resident)}
                        victim = min(cands, key=lambda k: (uses[k], order[k]))
                        if uses[key] < uses[victim]:
                            continue
                    del resident[victim]
                resident[key] = None
                busy.add(key)
                uploads += counted
    return {"hits": hits, "misses": misses, "uploads": uploads}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache")
    return read_gguf_model(write_qwen3moe(d / "q.gguf", n_layer=4, n_expert=16, n_used=4)[0])


@pytest.mark.parametrize("policy,share,slots", [("lru", 1.0, 10), ("lfu", 1.0, 10), ("lru", 0.5, 6),
                                                ("lfu", 0.7, 3), ("lru", 1.0, 2), ("lfu", 1.0, 2)])
def test_hits_equal_replay_of_trace(tmp_path, model, policy, share, slots):
    n_prompt, n_warmup, n_tokens = 8, 3, 40
    n_pos = n_prompt + n_warmup + n_tokens
    rng = np.random.default_rng(11)
    # skewed ids so the cache has something to keep: expert e drawn with weight 1/(e+1)
    p = 1.0 / np.arange(1, 17)
    trace = np.stack([[rng.choice(16, size=4, replace=False, p=p / p.sum()) for _ in model.moe_layer_indices]
                      for _ in range(n_pos)])
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"format": "moeplan-routing-trace", "version": 1, "n_experts": 16,
                                "n_experts_used": 4, "layers": list(model.moe_layer_indices),
                                "tokens": trace.tolist()}))
    cpu = model.moe_layer_indices[1:]
    placement = Placement(cpu_moe_layers=cpu, n_ctx=256, n_ubatch=8, n_threads=1)
    opt = ExecOptions(dtype="fp32", cache_experts=slots, cache_policy=policy, cache_upload_share=share)
    r = run_bench(model, placement, opt, RunSpec(n_prompt, n_tokens, n_warmup, RoutingSpec("trace", trace_path=str(path))),
                  free_bytes=FREE)
    idx = [list(model.moe_layer_indices).index(i) for i in cpu]
    want = replay(trace[:, idx], list(cpu), range(n_prompt, n_pos), slots, policy, share, n_prompt + n_warmup)
    got = r["cache"]
    assert (got["hits"], got["misses"], got["uploads"]) == (want["hits"], want["misses"], want["uploads"])
    if slots > 2:
        assert got["hits"] > 0
    else:  # 2 slots for 3 blocks x 4 experts per token: LRU thrashes, frequency keeps hot experts
        assert (got["hits"] > 0) == (policy == "lfu")
    assert r["cache_hit_rate"] == pytest.approx(want["hits"] / (want["hits"] + want["misses"]))
    # bytes on the device from cache slots: one expert per hit or upload, per token
    per_expert = 3 * 32 * 64 * 4
    assert r["bytes_per_token_by_tier"]["gpu_cache"] == (want["hits"] + want["uploads"]) * per_expert // n_tokens


def test_cache_policy_unit():
    c = ExpertCache(2, "lru")
    c.begin_step()
    assert c.access(0, 1) == (UPLOAD, 1) or c.access(0, 1)[0] == HIT
    c.begin_step()
    assert c.access(0, 1)[0] == HIT
    c.access(0, 2)
    c.begin_step()
    what, _ = c.access(0, 3)  # evicts expert 1 (least recent), not 2
    assert what == UPLOAD and (0, 1) not in c.slot_of and (0, 2) in c.slot_of
    c0 = ExpertCache(0, "lru")
    assert c0.access(0, 1) == (CPU, -1)
    f = ExpertCache(1, "lfu")
    f.begin_step()
    f.access(0, 1)
    f.begin_step()
    f.access(0, 1)
    f.begin_step()
    assert f.access(0, 2) == (CPU, -1)  # used once, the resident twice: not admitted
