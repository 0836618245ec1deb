"""The profile JSON schema and `load_hardware`, the door every --hw goes through."""
from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest
from probe_trees import FakeNvml, gpu_dev, listing, server_tree

from moeplan.errors import InputError, ProbeError
from moeplan.planner.hardware.profile import SCHEMA_VERSION, HardwareProfile
from moeplan.probes.hwprofile import load_hardware, read_cached, save_cached, write_json_atomic
from moeplan.probes.probe import read_machine
from moeplan.profiles import catalog

NO_TOOLS = {"which": lambda name: None, "find_library": lambda name: None}


def _probed(tmp_path, created=None, hostname="seed"):
    p = read_machine(str(server_tree(tmp_path / "tree")), FakeNvml([gpu_dev()]), system_kwargs=NO_TOOLS).profile
    from dataclasses import replace

    created = created or datetime.now(UTC)
    return replace(p, created=created.isoformat(timespec="seconds"),
                   system=replace(p.system, hostname=hostname))


def test_round_trip_of_a_probed_and_a_spec_profile(tmp_path):
    for p in (_probed(tmp_path), catalog.load_preset("epyc-genoa-2s-4090")):
        data = json.loads(json.dumps(p.to_dict()))
        assert HardwareProfile.from_dict(data) == p


def test_load_hardware_path_preset_and_errors(tmp_path):
    path = tmp_path / "hw.json"
    p = catalog.load_preset("desktop-4090-ddr5")
    write_json_atomic(str(path), p.to_dict())
    assert load_hardware(str(path)) == p
    assert load_hardware("desktop-3060-ddr4").name == "desktop-3060-ddr4"
    with pytest.raises(InputError):
        load_hardware("no-such-preset")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(ProbeError) as e:
        load_hardware(str(junk))
    assert "not valid JSON" in e.value.message and e.value.hint
    junk.write_text('{"hello": 1}')
    with pytest.raises(ProbeError, match="not a moeplan hardware profile"):
        load_hardware(str(junk))
    junk.write_text(json.dumps({**p.to_dict(), "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ProbeError) as e:
        load_hardware(str(junk))
    assert "upgrade moeplan" in e.value.hint
    with pytest.raises(ProbeError, match="does not exist"):
        load_hardware(str(tmp_path / "missing.json"))


def test_none_uses_a_fresh_cache_else_probes_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("moeplan.probes.hwprofile._hostname", lambda: "seed")
    said, probed = [], []
    fresh = _probed(tmp_path)

    def probe():
        probed.append(1)
        return fresh

    with pytest.raises(ProbeError, match="no recent probe"):
        load_hardware(None, allow_probe=False)
    assert load_hardware(None, probe=probe, say=said.append) == fresh
    assert probed == [1] and "probing it now" in said[0] and "cached the probe" in said[1]
    assert load_hardware(None, probe=probe, say=said.append) == fresh and probed == [1]  # from the cache
    old = _probed(tmp_path, created=datetime.now(UTC) - timedelta(days=8))
    save_cached(old)
    assert read_cached(7 * 24 * 3600, "seed") is None  # a week old: stale
    assert read_cached(9 * 24 * 3600, "seed") == old
    assert read_cached(9 * 24 * 3600, "another-host") is None  # a shared home folder, another machine


def test_unwritable_cache_is_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(blocker / "cache"))
    path, warning = save_cached(_probed(tmp_path))
    assert path is None and "MOEPLAN_CACHE_DIR" in warning


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path):
    class Unserialisable:
        pass

    before = listing(tmp_path)
    with pytest.raises(TypeError):
        write_json_atomic(str(tmp_path / "hw.json"), {"x": Unserialisable()})
    assert listing(tmp_path) == before
    write_json_atomic(str(tmp_path / "hw.json"), {"x": 1})
    write_json_atomic(str(tmp_path / "hw.json"), {"x": 2})
    assert json.loads((tmp_path / "hw.json").read_text()) == {"x": 2}
    assert os.listdir(tmp_path) == ["hw.json"]
