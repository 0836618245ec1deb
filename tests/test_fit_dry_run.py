"""llama.cpp's own dry run in tune/emit/calibrate (issue 33 item 7): the recorded real
`llama-fit-params -fitp on` runs of tests/data/fit_params (CPU build, one and two RPC devices;
tests/fit_params_record.py) against moeplan's figures, the verdict, tune's walk to the next
best plan, the learned compute-buffer factors, and (with MOEPLAN_LLAMA_BIN) the commands live."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from moeplan.probes.fitparams import FitRow, fit_params_program, fit_rows, free_mib
from moeplan.tuner.fitcheck import DeviceFigures, FitCheck, first_that_fits, fit_flags, judge
from moeplan.units import MIB

DATA = Path(__file__).parent / "data" / "fit_params"
RECORDS = {p.stem: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))}
BIN = os.environ.get("MOEPLAN_LLAMA_BIN", "")


def test_records_are_real_runs_of_the_plans_flags():
    assert set(RECORDS) >= {"cpu-qwen3moe", "rpc2-qwen3moe-tune", "rpc2-qwen3moe-cpumoe-q8", "rpc1-qwen3moe-cpumoe"}
    for name, rec in RECORDS.items():
        rows = fit_rows(rec["stdout"])
        n_dev, gpu = rec["case"]["n_devices"], rec["case"].get("gpu", False)
        names = [r.device for r in rows[:-1]] if gpu else [f"RPC{i}" for i in range(n_dev)]
        assert len(names) == n_dev and [r.device for r in rows] == names + ["Host"], name
        assert "0c1e570" in rec["build"]
        cmd = rec["command"]
        assert cmd[:3] == ["llama-fit-params", "-m", "MODEL.gguf"] and cmd[-3:] == ["-fitp", "on", "-v"]
        p = rec["placement"]
        assert cmd[cmd.index("-c") + 1] == str(p["n_ctx"]) and cmd[cmd.index("-ub") + 1] == str(p["n_ubatch"])
        assert ("--rpc" in cmd) == (n_dev > 0 and not gpu)
        free = free_mib("\n".join(rec["device_lines"]))
        assert sorted(free) == sorted(names) and all(v > 0 for v in free.values())


@pytest.fixture(scope="module")
def fixture_model(tmp_path_factory):
    """The GGUF every record loaded (llama_fixtures.write_qwen3moe_llama, 6 layers)."""
    from llama_fixtures import write_qwen3moe_llama

    from moeplan.probes.models import resolve_model

    path = tmp_path_factory.mktemp("fitp") / "qwen3moe.gguf"
    write_qwen3moe_llama(path, n_layer=6)
    return resolve_model(str(path))


def _figures(rec, spec, consts=None):
    from fit_params_record import fake_hw

    from moeplan.planner.cost.report import memory_report
    from moeplan.planner.memory.accounting import MemoryConstants, estimate_memory
    from moeplan.planner.placement import Placement
    from moeplan.planner.serde import from_jsonable
    from moeplan.tuner.fitcheck import plan_figures

    p = from_jsonable(Placement, rec["placement"])
    mem = memory_report(estimate_memory(spec, p, consts or MemoryConstants()), fake_hw(rec["gpu_budget_bytes"]))
    return plan_figures(mem, rec["gpu_budget_bytes"])


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_moeplan_beside_the_recorded_dry_run(name, fixture_model):
    """Each device: weights and KV in llama.cpp's truncated MiB exactly, compute never below;
    the CPU build's host: KV and compute exact (CPU-only: the whole graph)."""
    rec = RECORDS[name]
    assert fixture_model.digest() == rec["fixture"]["digest"]
    rows = fit_rows(rec["stdout"])
    figs = _figures(rec, fixture_model)
    assert len(figs) == len(rows)
    for r, f in zip(rows[:-1], figs[:-1]):
        assert f.model_bytes // MIB == r.model_mib, (name, r)
        assert f.context_bytes // MIB == r.context_mib, (name, r)
        assert f.compute_bytes >= r.compute_mib * MIB, (name, r)
    if rec["case"]["n_devices"] == 0:
        host, fig = rows[-1], figs[-1]
        assert (fig.context_bytes // MIB, fig.compute_bytes // MIB) == (host.context_mib, host.compute_mib)


def test_verdict_of_the_recorded_runs(fixture_model):
    """The recorded single-RPC plan: 388 MiB of buffers + 640 MiB CUDA context + 1 GiB margin
    is over a 2 GiB budget; the same rows fit 2.1 GiB; a device llama.cpp reports short of free
    memory does not fit whatever the profile says."""
    rec = RECORDS["rpc1-qwen3moe-cpumoe"]
    rows = fit_rows(rec["stdout"])
    figs = _figures(rec, fixture_model)
    free = free_mib("\n".join(rec["device_lines"]))
    bad = judge(rows, figs, free)
    assert bad.status == "does-not-fit" and not bad.fits
    assert bad.devices[0].need_bytes == (82 + 48 + 258) * MIB + 640 * MIB + 1024 * MIB
    assert "RPC0" in bad.note and "budget is 2.00 GiB" in bad.note and bad.hint
    roomy = [DeviceFigures(f.device, f.model_bytes, f.context_bytes, f.compute_bytes, f.other_bytes, f.margin_bytes,
                           None if f.budget_bytes is None else f.budget_bytes + 100 * MIB) for f in figs]
    assert judge(rows, roomy, free).status == "fits"
    short = judge(rows, roomy, {"RPC0": 1300})
    assert short.status == "does-not-fit" and "1,300 MiB llama.cpp reports free" in short.note
    assert json.loads(json.dumps(bad.to_dict()))["per_device"][0]["fits"] is False


def test_other_device_count_is_shown_not_judged():
    rows = [FitRow("CUDA0", 10, 1, 1), FitRow("CUDA1", 10, 1, 1), FitRow("Host", 1, 0, 1)]
    figs = [DeviceFigures("GPU0", 20 * MIB, MIB, MIB, budget_bytes=MIB), DeviceFigures("Host", MIB, 0, MIB)]
    c = judge(rows, figs, {})
    assert c.status == "not-compared" and c.fits and "2 device(s)" in c.note


def test_tune_walks_to_the_next_best_that_fits(fixture_model):
    """A refused plan is replaced by the first candidate llama.cpp says fits; none: no index."""
    recs = [RECORDS["rpc1-qwen3moe-cpumoe"], RECORDS["rpc2-qwen3moe-tune"]]
    checks = [judge(fit_rows(r["stdout"]), _figures(r, fixture_model), free_mib("\n".join(r["device_lines"])))
              for r in recs]
    assert [c.status for c in checks] == ["does-not-fit", "fits"]
    calls = []

    def thunk(c):
        def run():
            calls.append(c)
            return c
        return run

    walk = first_that_fits([("a", thunk(checks[0])), ("b", thunk(checks[1])), ("c", thunk(checks[1]))])
    assert walk.index == 1 and walk.labels == ["a", "b"] and len(calls) == 2
    assert first_that_fits([("a", thunk(checks[0]))] * 3).index is None
    skipped = FitCheck("skipped", "no --bin")
    assert first_that_fits([("a", lambda: skipped), ("b", thunk(checks[1]))]).index == 0


def test_only_the_flags_fit_params_takes_are_passed():
    parts = [("llama-server",), ("-m", "x.gguf"), ("-ngl", "99"), ("-ot", "exps=CPU"), ("--host", "0.0.0.0"),
             ("-c", "4096"), ("--jinja",)]
    accepted = {"-ngl", "-ot", "-c"}.__contains__
    assert fit_flags(parts, accepted) == ["-ngl", "99", "-ot", "exps=CPU", "-c", "4096"]


def test_learned_factors_leave_no_observation_above(fixture_model):
    """From the recorded runs: the GPU and host compute factors; with them no device's
    compute buffer is above moeplan's, and the planner applies them."""
    from moeplan.planner.memory.accounting import MemoryConstants
    from moeplan.tuner.fitcal import learn, observations

    obs = []
    for name, rec in sorted(RECORDS.items()):
        got, notes = observations(name, fit_rows(rec["stdout"]), _figures(rec, fixture_model))
        assert notes == []  # weights and KV agree on every device
        obs += got
    cal = learn(obs, "llama.cpp")
    assert cal is not None and cal.backend == "llama.cpp memory (llama-fit-params)"
    f = cal.factors
    assert set(f) == {"compute_factor_gpu", "compute_factor_host"}
    for o in obs:
        assert o.moeplan_bytes * f[f"compute_factor_{o.kind}"] >= (o.llama_cpp_mib + 1) * MIB - 1
    # the recorded host buffers with experts on the CPU (RPC devices have no op offload) are
    # above moeplan's: the host factor is > 1; the devices' are at or below moeplan's
    assert f["compute_factor_host"] > 1.5 and f["compute_factor_gpu"] <= 1.01
    rec = RECORDS["rpc2-qwen3moe-cpumoe-q8"]
    base = _figures(rec, fixture_model)
    scaled = _figures(rec, fixture_model, MemoryConstants(compute_factor_gpu=f["compute_factor_gpu"],
                                                          compute_factor_host=f["compute_factor_host"]))
    for b, s, r in zip(base, scaled, fit_rows(rec["stdout"])):
        kind = "host" if r.device == "Host" else "gpu"
        assert abs(s.compute_bytes - b.compute_bytes * f[f"compute_factor_{kind}"]) <= 1
        assert s.compute_bytes >= r.compute_mib * MIB


def test_profile_calibration_reaches_the_constants():
    from dataclasses import replace

    from moeplan.planner.hardware.profile import Calibration
    from moeplan.planner.memory.constants import memory_constants
    from moeplan.probes.hwprofile import load_hardware

    hw = load_hardware("desktop-4090-ddr5", allow_probe=False)
    cal = Calibration(factors={"compute_factor_gpu": 1.25, "compute_factor_host": 2.0},
                      backend="llama.cpp memory (llama-fit-params)")
    c = memory_constants(replace(hw, calibration=(cal,)), "llama.cpp")
    assert (c.compute_factor_gpu, c.compute_factor_host) == (1.25, 2.0)
    assert memory_constants(replace(hw, calibration=(cal,)), "ik_llama.cpp").compute_factor_gpu == 1.0


def test_tune_without_bin_skips_with_a_note(tmp_path):
    from conftest import _cli
    from gguf_fixtures import write_qwen3moe

    path, _ = write_qwen3moe(tmp_path / "m.gguf", n_layer=4)
    r = _cli("tune", str(path), "--hw", "desktop-4090-ddr5", "--ctx", "4096", "--json")
    assert r.exit_code == 0, r.output
    fit = json.loads(r.stdout)["llama_fit_params"]
    assert fit["status"] == "skipped" and "--bin" in fit["note"] and fit["per_device"] == []
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "llama-server").write_text("")
    r = _cli("tune", str(path), "--hw", "desktop-4090-ddr5", "--ctx", "4096", "--bin", str(empty), "--json")
    assert r.exit_code == 0, r.output
    assert "no llama-fit-params" in json.loads(r.stdout)["llama_fit_params"]["note"]


LIVE = pytest.mark.skipif(not BIN or fit_params_program(Path(BIN)) is None,
                          reason="set MOEPLAN_LLAMA_BIN to a llama.cpp build/bin with llama-fit-params and "
                                 "ggml-rpc-server")


@LIVE
def test_live_tune_emit_calibrate_on_two_rpc_devices(tmp_path, fixture_model):
    """tune --bin --rpc shows llama.cpp's rows beside moeplan's, emit checks the saved plan,
    calibrate --fit-params learns and stores the factors."""
    from conftest import _cli
    from fit_params_record import CASES, profile
    from llama_rpc import RpcServers

    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps(profile(next(c for c in CASES if c.name == "rpc2-qwen3moe-tune")).to_dict()))
    model = fixture_model.path
    with RpcServers(Path(BIN), 2) as rpc:
        r = _cli("tune", model, "--hw", str(hw), "--ctx", "4096", "--bin", BIN, "--rpc", rpc.rpc_arg, "--json",
                 "--out", str(tmp_path / "plan.json"))
        assert r.exit_code == 0, r.output
        fit = json.loads(r.stdout)["llama_fit_params"]
        assert fit["status"] == "fits", fit
        devs = fit["per_device"]
        assert [d["device"] for d in devs] == ["RPC0", "RPC1", "Host"]
        for d in devs[:2]:
            assert int(d["moeplan_model_mib"]) == d["llama_cpp_model_mib"]
            assert d["moeplan_compute_mib"] >= d["llama_cpp_compute_mib"]
        r = _cli("emit", str(tmp_path / "plan.json"), "--bin", BIN, "--rpc", rpc.rpc_arg, "--out",
                 str(tmp_path / "launch"), "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["llama_fit_params"]["status"] == "fits"
        r = _cli("calibrate", "--fit-params", str(tmp_path / "plan.json"), "--bin", BIN, "--rpc", rpc.rpc_arg,
                 "--hw", str(hw), "--json")
        assert r.exit_code == 0, r.output
        cal = json.loads(r.stdout)["fit_params"]["calibration"]
        assert cal["backend"] == "llama.cpp memory (llama-fit-params)" and "compute_factor_gpu" in cal["factors"]
    stored = json.loads(hw.read_text())["calibration"]
    assert any(c["backend"] == "llama.cpp memory (llama-fit-params)" for c in stored)


def _fake_build(folder: Path, free_when_ub1024: int, free_else: int) -> Path:
    """A stand-in build folder (no llama.cpp needed): llama-server answers --help with the
    recorded 0c1e570 help; llama-fit-params prints the recorded rpc2-qwen3moe-tune run's rows and
    its 'using device' lines, with the free MiB replaced - free_when_ub1024 when its argv holds
    `-ub 1024`, else free_else - so tune's walk and emit's refusal run through the real CLI and
    subprocess. The free figures are the test's, not a recording."""
    import stat

    help_dir = Path(__file__).parent / "data" / "help" / "llama.cpp-0c1e570"
    rec = RECORDS["rpc2-qwen3moe-tune"]
    folder.mkdir()
    (folder / "rows.txt").write_text(rec["stdout"])
    (folder / "log.txt").write_text("\n".join(rec["device_lines"]) + "\n")
    scripts = {
        "llama-server": f'case "$1" in --version) echo "version: 0 (0c1e570)";; *) cat "{help_dir}/llama-server.txt";; esac\n',
        "llama-fit-params": (
            f'case "$1" in --help) cat "{help_dir}/llama-server.txt"; exit 0;; --version) echo "version: 0"; exit 0;; esac\n'
            f'free={free_else}\ncase " $* " in *" -ub 1024 "*) free={free_when_ub1024};; esac\n'
            f'sed "s/- [0-9]* MiB free/- $free MiB free/" "{folder}/log.txt" >&2\ncat "{folder}/rows.txt"\n'),
    }
    for name, body in scripts.items():
        p = folder / name
        p.write_text("#!/bin/sh\n" + body)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture(scope="module")
def hw2(tmp_path_factory):
    from fit_params_record import CASES, profile

    out = tmp_path_factory.mktemp("hw") / "hw2.json"
    out.write_text(json.dumps(profile(next(c for c in CASES if c.name == "rpc2-qwen3moe-tune")).to_dict()))
    return str(out)


def test_tune_refuses_what_llamacpp_says_does_not_fit_and_takes_the_next_best(tmp_path, fixture_model, hw2):
    """tune's plan (ub 1024) is refused where llama.cpp reports 1,300 MiB free (191+24+88 MiB of
    buffers + the 1 GiB margin do not fit); the next best at another ubatch is recommended."""
    from conftest import _cli

    fake = _fake_build(tmp_path / "bin", 1300, 24105)
    r = _cli("tune", fixture_model.path, "--hw", hw2, "--ctx", "4096", "--bin", str(fake), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    fit, plan = doc["llama_fit_params"], doc["plan"]
    assert fit["status"] == "fits" and plan["placement"]["n_ubatch"] != 1024
    assert fit["refused"] and all("1,300 MiB llama.cpp reports free" in x for x in fit["refused"][:-1])
    assert any("refused" in n for n in plan["notes"])
    assert fit["command"][-3:] == ["-fitp", "on", "-v"] and "-ts" in fit["command"]
    r = _cli("tune", fixture_model.path, "--hw", hw2, "--ctx", "4096", "--bin", str(fake))
    assert r.exit_code == 0 and "llama.cpp's dry run" in r.stdout and "RPC0" in r.stdout


def test_nothing_fits_is_one_line_error_and_emit_writes_nothing(tmp_path, fixture_model, hw2):
    from conftest import _cli

    fake = _fake_build(tmp_path / "bin", 1300, 1300)
    r = _cli("tune", fixture_model.path, "--hw", hw2, "--ctx", "4096", "--bin", str(fake))
    assert r.exit_code == 5
    assert "does not fit" in r.output and "hint:" in r.output
    r = _cli("tune", fixture_model.path, "--hw", hw2, "--ctx", "4096", "--out", str(tmp_path / "plan.json"))
    assert r.exit_code == 0, r.output
    r = _cli("emit", str(tmp_path / "plan.json"), "--bin", str(fake), "--out", str(tmp_path / "launch"))
    assert r.exit_code == 5 and "RPC0" in r.output and "tune" in r.output
    assert not (tmp_path / "launch").exists()


def test_calibrate_fit_params_stores_factors_the_planner_uses(tmp_path, fixture_model, hw2):
    """calibrate --fit-params through the CLI (the stand-in build prints the recorded rows for
    every placement): the factors are stored in --hw's file and the next estimate scales its
    compute buffers by them."""
    from conftest import _cli

    fake = _fake_build(tmp_path / "bin", 24105, 24105)
    hw = tmp_path / "hw.json"
    hw.write_text(Path(hw2).read_text())
    plan = tmp_path / "plan.json"
    r = _cli("tune", fixture_model.path, "--hw", str(hw), "--ctx", "4096", "--out", str(plan))
    assert r.exit_code == 0, r.output
    r = _cli("calibrate", "--fit-params", str(plan), "--bin", str(fake), "--hw", str(hw), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)["fit_params"]
    f = doc["calibration"]["factors"]
    assert doc["profile_path"] == str(hw) and set(f) == {"compute_factor_gpu", "compute_factor_host"}
    assert all(o["moeplan_bytes"] * f[f"compute_factor_{o['kind']}"] >= (o["llama_cpp_mib"] + 1) * MIB - 1
               for o in doc["observations"])
    args = ("estimate", fixture_model.path, "--ctx", "4096", "--json")
    before = json.loads(_cli(*args, "--hw", hw2).stdout)
    after = json.loads(_cli(*args, "--hw", str(hw)).stdout)

    def compute(d, name):
        return next(i["bytes"] for i in d["memory"]["items"] if i["name"] == name)

    assert compute(after, "compute_cpu") >= compute(before, "compute_cpu") * f["compute_factor_host"] - 1
    r = _cli("calibrate", "--fit-params", str(plan), "--hw", str(hw))
    assert r.exit_code == 2 and "--bin" in r.output
