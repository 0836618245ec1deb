"""`moeplan probe` end to end on this machine, with tiny measurement sizes, and the cache."""
from __future__ import annotations

import json
import os
import stat

import pytest
from probe_trees import listing
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.planner.hardware.profile import SCHEMA_VERSION, HardwareProfile
from moeplan.probes import probe as probe_mod
from moeplan.probes.dram import DramSettings
from moeplan.probes.storage import StorageSettings

MIB = 1024**2
TINY = probe_mod.ProbeSettings("quick", DramSettings(0, 8 * MIB, 2, 1, 1),
                               StorageSettings(MIB, 0.05, 4 * MIB, 0.05), matmul_n=128, matmul_reps=2,
                               copy_bytes=8 * MIB, copy_reps=2, load_window_s=0.05)


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(probe_mod, "QUICK", TINY)
    monkeypatch.setattr(probe_mod, "FULL", TINY)
    cache = tmp_path / "cache"
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(cache))
    return cache


def test_probe_json_writes_cache_and_out(tiny, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(os.urandom(2 * MIB))
    before = listing(tmp_path)
    r = CliRunner().invoke(app, ["probe", "--quick", "--json", "--model-path", str(model),
                                 "--out", str(tmp_path / "hw.json")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["origin"] == "probe" and doc["created"]
    p = HardwareProfile.from_dict(doc)
    assert p.to_dict() == doc  # the JSON is a profile that reads back unchanged
    assert p.cpu.core_read_bytes_per_s.source == "measured" and p.cpu.core_flop_per_s.source == "measured"
    assert all(n.dram_read_bytes_per_s.source == "measured" for n in p.numa_nodes if n.cpus)
    assert p.storage[0].seq_read_bytes_per_s.source == "measured"
    assert p.load.cpu_busy_before is not None and p.probe_mode == "quick"
    assert "probe:" not in r.stderr  # no progress under --json without --progress; JSON alone on stdout
    # only the two files we asked for were written: the cache and --out
    assert listing(tmp_path) - before == {"cache/hardware-probe.json", "hw.json"}
    assert json.loads((tmp_path / "hw.json").read_text())["created"] == doc["created"]


def test_probe_table_output(tiny):
    r = CliRunner().invoke(app, ["probe"])
    assert r.exit_code == 0, r.stderr
    assert "NUMA: available" in r.stdout and "how each figure was obtained" in r.stdout
    assert "pass --model-path" in r.stdout


def test_probe_progress_lines_count_to_the_expected_steps(tiny):
    # --progress with --json into a pipe: plain lines with the step count, elapsed time and ETA,
    # and the count never passes the total run_probe announced
    r = CliRunner().invoke(app, ["probe", "--json", "--progress"])
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("probe: ")]
    assert any("DRAM read" in ln for ln in lines) and lines[-1].startswith("probe: load after")
    counts = [tuple(map(float, ln.split("[")[1].split("]")[0].split("/"))) for ln in lines if "[" in ln]
    assert counts and all(done <= total for done, total in counts)
    assert any("ETA" in ln for ln in lines)


def test_probe_read_only_cache_is_a_warning(tiny):
    tiny.mkdir()
    os.chmod(tiny, stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(tiny, os.W_OK):
            pytest.skip("running as root: a read-only folder is still writable")
        r = CliRunner().invoke(app, ["probe", "--json"])
    finally:
        os.chmod(tiny, stat.S_IRWXU)
    assert r.exit_code == 0
    assert "could not cache the probe" in r.stderr
    json.loads(r.stdout)


def test_probe_cache_file_in_the_way_is_a_warning(tiny):
    tiny.parent.mkdir(exist_ok=True)
    tiny.write_text("a file where the cache folder should be")
    r = CliRunner().invoke(app, ["probe", "--json"])
    assert r.exit_code == 0 and "could not cache the probe" in r.stderr


def test_probe_rejects_quick_and_full(tiny):
    r = CliRunner().invoke(app, ["probe", "--quick", "--full", "--json"])
    assert r.exit_code == 2
    assert json.loads(r.stdout)["error"]["kind"] == "input"


def test_probe_missing_model_path_fails_before_measuring(tiny, tmp_path):
    r = CliRunner().invoke(app, ["probe", "--model-path", str(tmp_path / "nope.gguf")])
    err = " ".join(r.stderr.split())  # rich wraps long lines at the terminal width
    assert r.exit_code == 2 and "no such file" in err and "probe: DRAM" not in err
