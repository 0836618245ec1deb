"""Issue 13: every input checked with the same limits by every command, nothing half-written,
exit codes as the README says, output a person can paste."""
from __future__ import annotations

import copy
import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest
from gguf_fixtures import write_qwen3moe
from typer.testing import CliRunner

from moeplan.cli import app
from moeplan.errors import InputError, ModelFormatError, MoeplanError, ProbeError

RUN = CliRunner()
HW = "desktop-4090-ddr5"
PRESET = Path(__file__).resolve().parent.parent / "moeplan" / "profiles" / "hardware" / f"{HW}.json"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path, _ = write_qwen3moe(tmp_path_factory.mktemp("rel") / "tiny.gguf")
    return str(path)


@pytest.fixture(scope="module")
def plan_doc(tiny, tmp_path_factory) -> dict:
    out = RUN.invoke(app, ["tune", tiny, "--hw", HW, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def _err_line(out) -> str:
    lines = [ln for ln in out.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, out.output
    assert "Traceback" not in out.output
    return lines[0]


# ---- one set of limits for every command ------------------------------------------------------

@pytest.mark.parametrize("flags,words", [
    (["--threads", "-4"], "--threads = -4"),
    (["--threads", "100000"], "--threads = 100000 is outside 1..32"),
    (["--depth", "-5"], "--depth = -5"),
    (["--prompt", "-1"], "--prompt = -1"),
    (["--ctx", "999999999999"], "maximum context of 4,096 tokens"),
])
def test_tune_and_estimate_refuse_the_same_flags(tiny, flags, words):
    for cmd in ("tune", "estimate"):
        out = RUN.invoke(app, [cmd, tiny, "--hw", HW, *flags])
        assert out.exit_code == 2, (cmd, out.output)
        assert words in _err_line(out), (cmd, out.output)


@pytest.mark.parametrize("edit,code,words", [
    (lambda h: h["numa_nodes"][0].__setitem__("dram_read_bytes_per_s", {"value": -1e11}), 4,
     "numa_nodes[0].dram_read_bytes_per_s.value = -100000000000.0 must be above 0"),
    (lambda h: h["gpus"][0].__setitem__("mem_bw_bytes_per_s", {"value": -1e12}), 4, "mem_bw_bytes_per_s.value"),
    (lambda h: h.__setitem__("cpu", None), 4, "cpu = None is not allowed to be null"),
    (lambda h: h["gpus"][0].__setitem__("vram_bytes", "24G"), 4, "gpus[0].vram_bytes = '24G' is not a whole number"),
    (lambda h: h["gpus"][0].__setitem__("numa_node", 7), 4, "gpus[0].numa_node = 7 is not one of"),
    (lambda h: h["cpu"].__setitem__("n_threads", 0), 4, "cpu.n_threads = 0 is below the minimum 1"),
])
def test_bad_hardware_profiles_exit_4_naming_the_field(tmp_path, tiny, edit, code, words):
    doc = json.loads(PRESET.read_text())
    edit(doc)
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps(doc))
    for cmd in ("tune", "estimate"):
        out = RUN.invoke(app, [cmd, tiny, "--hw", str(hw)])
        assert out.exit_code == code, out.output
        assert words in _err_line(out)


def test_every_bundled_preset_passes_the_checks():
    from moeplan.planner.limits import check_hardware
    from moeplan.probes.hwprofile import read_profile

    for path in PRESET.parent.glob("*.json"):
        check_hardware(read_profile(str(path)), str(path))


def test_limits_are_pure_and_name_field_value_and_limit():
    from moeplan.planner.limits import LAYERS, check_hparams, check_int

    with pytest.raises(ModelFormatError) as exc:
        check_hparams({"block_count": 10**9, "embedding_length": 64}, "m.gguf", "qwen3moe.")
    assert exc.value.message == "m.gguf: qwen3moe.block_count = 1000000000 is above the limit 1000"
    with pytest.raises(InputError, match="x = 'abc' is not a whole number"):
        check_int("abc", "x", LAYERS, InputError, "hint")
    with pytest.raises(ModelFormatError, match="expert_used_count = 9 is above qwen3moe.expert_count = 8"):
        check_hparams({"block_count": 2, "expert_count": 8, "expert_used_count": 9}, "m.gguf", "qwen3moe.")


def test_hf_config_nonsense_exits_3(tmp_path):
    from hf_fixtures import GPT_OSS_TINY, gpt_oss_tensors, write_hf_folder

    folder = write_hf_folder(tmp_path / "hf", GPT_OSS_TINY, gpt_oss_tensors(GPT_OSS_TINY), n_shards=1)
    for key, value, words in (("num_hidden_layers", 10**12, "num_hidden_layers = 1000000000000 is above the limit"),
                              ("num_local_experts", -4, "num_local_experts = -4 is below the minimum 0"),
                              ("hidden_size", "abc", "hidden_size = 'abc' is not a whole number"),
                              ("max_position_embeddings", -1, "max_position_embeddings = -1")):
        cfg = dict(GPT_OSS_TINY, **{key: value})
        (folder / "config.json").write_text(json.dumps(cfg))
        for cmd in (["inspect", str(folder)], ["tune", str(folder), "--hw", HW]):
            out = RUN.invoke(app, cmd)
            assert out.exit_code == 3, out.output
            assert words in _err_line(out)


def test_split_name_of_zero_shards_is_a_format_error(tmp_path, tiny):
    p = tmp_path / "x-00001-of-00000.gguf"
    p.write_bytes(Path(tiny).read_bytes())
    out = RUN.invoke(app, ["inspect", str(p)])
    assert out.exit_code == 3 and "not a valid split-file name" in _err_line(out)


# ---- plans: one reader, schema checked, tune --json accepted ------------------------------------

def test_emit_accepts_what_tune_json_prints(tmp_path, plan_doc):
    f = tmp_path / "tune.json"
    f.write_text(json.dumps(plan_doc))
    out = RUN.invoke(app, ["emit", str(f), "--out", str(tmp_path / "e")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "e" / "launch.sh").exists()


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["placement"].__setitem__("n_ctx", -5), "placement.n_ctx = -5 must be at least 1"),
    (lambda d: d["placement"].__setitem__("n_ubatch", 0), "placement.n_ubatch = 0 is below the minimum 1"),
    (lambda d: d["placement"].update(numa="bind", numa_nodes=[99]), "NUMA node 99"),
    (lambda d: d["placement"].__setitem__("cache_type_k", "q3_z"), "placement.cache_type_k = 'q3_z' is not one of"),
    (lambda d: d.__setitem__("schema_version", 99), "schema_version = 99; this moeplan reads up to 1"),
    (lambda d: d["placement"].__setitem__("n_threads", "x"), "placement.n_threads = 'x' is not a whole number"),
    (lambda d: d["placement"].__setitem__("cpu_moe_layers", [0, 77]), "placement.cpu_moe_layers names block 77"),
])
def test_hand_edited_plans_are_refused_by_emit_and_bench(tmp_path, tiny, plan_doc, edit, words):
    doc = copy.deepcopy(plan_doc["plan"])
    edit(doc)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(doc))
    out = RUN.invoke(app, ["emit", str(f), "--out", str(tmp_path / "e")])
    assert out.exit_code == 2, out.output
    assert words in _err_line(out)
    assert not (tmp_path / "e").exists(), "nothing written"
    from moeplan.planfile import read_plan

    with pytest.raises(InputError, match=re.escape(words.split(" = ")[0][:25])):
        plan = read_plan(f)
        from moeplan.commands.bench import read_plan_placement
        from moeplan.probes.models import resolve_model

        read_plan_placement(str(f), resolve_model(tiny), plan)
        from moeplan.probes.numa import check_numa_nodes_here

        check_numa_nodes_here(plan.placement, str(f))


def test_emit_keeps_a_bind_to_a_node_of_the_plans_own_machine(tmp_path, tiny):
    # planned here for a two-socket preset, bound to its second node: the node exists on the
    # machine the plan is for (this one may have a single node), so emit writes it
    out = RUN.invoke(app, ["tune", tiny, "--hw", "epyc-genoa-2s-4090", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)["plan"]
    doc["placement"].update(numa="bind", numa_nodes=[1])
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(doc))
    out = RUN.invoke(app, ["emit", str(f), "--out", str(tmp_path / "e")])
    assert out.exit_code == 0, out.output
    assert "--membind=1" in (tmp_path / "e" / "launch.sh").read_text()
    doc["placement"].update(numa_nodes=[2])  # that machine has nodes 0 and 1 only
    f.write_text(json.dumps(doc))
    out = RUN.invoke(app, ["emit", str(f), "--out", str(tmp_path / "e2")])
    assert out.exit_code == 2 and "NUMA node 2" in _err_line(out)


def test_calibrate_reads_plans_through_the_same_reader(tmp_path, plan_doc):
    doc = {"plan": dict(plan_doc["plan"], schema_version=99), "trials": []}
    f = tmp_path / "results.json"
    f.write_text(json.dumps(doc))
    out = RUN.invoke(app, ["calibrate", "--from", str(f), "--hw", HW])
    assert out.exit_code == 2 and "schema_version = 99" in _err_line(out)


# ---- nothing half-written -----------------------------------------------------------------------

def test_bad_plot_format_is_refused_before_any_file_is_written(tmp_path, tiny):
    out = RUN.invoke(app, ["tune", tiny, "--hw", HW, "--emit", str(tmp_path / "e"), "--out",
                           str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.bmp")])
    assert out.exit_code == 2 and "'bmp' picture" in _err_line(out)
    assert sorted(os.listdir(tmp_path)) == []


def test_concurrent_emits_into_one_folder_never_mix(tmp_path, tiny):
    """Two writers with different file sets into one folder: the folder ends with one whole set,
    and no temporary folder is left."""
    from moeplan.io import write_file_set

    out = tmp_path / "e"
    sets = [[(f"f{i}.txt", f"writer {w}\n" * 20000, False) for i in range(6)] for w in range(2)]
    errors = []

    def write(files):
        try:
            for _ in range(5):
                write_file_set(out, files)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    texts = {(out / f"f{i}.txt").read_text() for i in range(6)}
    assert len(texts) == 1, "files from two writers mixed"
    assert sorted(p.name for p in out.iterdir()) == [f"f{i}.txt" for i in range(6)]


def test_user_files_respect_the_umask_and_the_cache_is_private(tmp_path, tiny, monkeypatch):
    from moeplan.io import PRIVATE, write_text_atomic
    from moeplan.probes.hwprofile import read_profile, save_cached

    old = os.umask(0o022)
    try:
        out = RUN.invoke(app, ["tune", tiny, "--hw", HW, "--out", str(tmp_path / "plan.json"),
                               "--emit", str(tmp_path / "e")])
        assert out.exit_code == 0, out.output
        assert stat.S_IMODE((tmp_path / "plan.json").stat().st_mode) == 0o644
        assert stat.S_IMODE((tmp_path / "e" / "launch.sh").stat().st_mode) == 0o755
        assert stat.S_IMODE((tmp_path / "e" / "plan.json").stat().st_mode) == 0o644
        os.umask(0o077)
        write_text_atomic(tmp_path / "strict.txt", "x")
        assert stat.S_IMODE((tmp_path / "strict.txt").stat().st_mode) == 0o600
        os.umask(0o022)
        monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path / "cache"))
        path, _ = save_cached(read_profile(str(PRESET)))
        assert stat.S_IMODE(os.stat(path).st_mode) == PRIVATE
    finally:
        os.umask(old)


# ---- exit codes ---------------------------------------------------------------------------------

def test_ctrl_c_exits_130_in_json_too(monkeypatch, tiny):
    import moeplan.probes.models as models

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "resolve_model", interrupted)
    out = RUN.invoke(app, ["tune", tiny, "--hw", HW, "--json"])
    assert out.exit_code == 130
    err = json.loads(out.stdout)["error"]
    assert err["exit_code"] == 130 and err["kind"] == "interrupted"


def test_error_classes_match_the_readme_table():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for cls in (InputError, ModelFormatError, ProbeError):
        assert f"| {cls.exit_code} " in readme
    assert "| 130 " in readme
    assert MoeplanError.exit_code == 1


def test_infeasible_context_names_the_models_maximum(tiny):
    out = RUN.invoke(app, ["tune", tiny, "--hw", HW, "--ctx", "16000000"])
    assert out.exit_code == 5, out.output
    assert "maximum context of 4,096" in out.output


# ---- output for people --------------------------------------------------------------------------

def test_help_has_no_bool_noise():
    for cmd in ([], ["tune"], ["estimate"], ["bench"], ["emit"], ["calibrate"], ["inspect"]):
        out = RUN.invoke(app, [*cmd, "--help"], env={"COLUMNS": "100"})
        assert out.exit_code == 0
        assert "<bool>" not in out.output, cmd


def test_the_command_to_copy_is_one_line_at_80_columns():
    out = RUN.invoke(app, ["tune", "deepseek-v3", "--hw", HW], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    cmd = lines[lines.index("run it:") + 1]
    assert cmd.startswith("llama-server ") and cmd.rstrip().endswith("-np 1") and len(cmd) > 80


def test_model_names_are_never_broken():
    from moeplan.profiles.model_profiles import list_profiles

    out = RUN.invoke(app, ["models"], env={"COLUMNS": "80"})
    assert out.exit_code == 0
    names = [p["name"] if isinstance(p, dict) else p for p in list_profiles()]
    for name in names:
        assert name in out.output, name
