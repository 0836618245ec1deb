"""Windows: the probe through an injected Win32 API, the planner's Windows NUMA/WDDM rules,
launch.cmd / launch.ps1 quoting read back with tokenizers written from the documented rules
(tests/winshell.py), golden Windows launch files, and moeplan on a simulated win32."""
from __future__ import annotations

import json
import struct
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from goldens import assert_golden
from hypothesis import given, settings
from hypothesis import strategies as st
from launch_plans import make_plan, write_models
from typer.testing import CliRunner
from winshell import cmd_run_line, msvcrt_argv, ps_array, ps_native_line

from moeplan import __version__
from moeplan.cli import app
from moeplan.errors import InputError
from moeplan.launch import emit_launch, render_files
from moeplan.launch.common import Command, Launch, Script
from moeplan.launch.winscripts import legacy_unsafe, msvcrt_quote, render_cmd, render_ps1
from moeplan.planner.hardware.windows import WDDM_RESERVE_BYTES
from moeplan.planner.placement import Placement
from moeplan.probes.probe import read_machine_windows
from moeplan.probes.windows import (
    RELATION_CACHE,
    RELATION_CORE,
    RELATION_NUMA,
    RELATION_PACKAGE,
    parse_cim_dimms,
    parse_processor_records,
)

RUN = CliRunner()
GIB = 1024**3
GOLDEN = Path(__file__).parent / "golden" / "launch-windows"


# ---- the Win32 API, faked with answers shaped after the documented structures ---------------
# (not recordings of a real machine: the layouts are those of winnt.h on x64, the values a
# 2-socket machine with 4 cores x 2 threads per socket, one L3 per socket)

def _group_affinity(group: int, mask: int) -> bytes:
    return struct.pack("<QH3H", mask, group, 0, 0, 0)  # GROUP_AFFINITY, 16 bytes


def _processor(rel: int, smt: bool, group: int, mask: int) -> bytes:
    # PROCESSOR_RELATIONSHIP: Flags, EfficiencyClass, Reserved[20], GroupCount, GroupMask[]
    body = struct.pack("<BB20sH", 1 if smt else 0, 0, b"\0" * 20, 1) + _group_affinity(group, mask)
    return struct.pack("<II", rel, 8 + len(body)) + body


def _numa(node: int, group: int, mask: int) -> bytes:
    # NUMA_NODE_RELATIONSHIP: NodeNumber, Reserved[18], GroupCount, GroupMasks[]
    body = struct.pack("<I18sH", node, b"\0" * 18, 1) + _group_affinity(group, mask)
    return struct.pack("<II", RELATION_NUMA, 8 + len(body)) + body


def _cache(level: int, size: int, group: int, mask: int) -> bytes:
    # CACHE_RELATIONSHIP: Level, Associativity, LineSize, CacheSize, Type, Reserved[18], GroupCount, masks
    body = struct.pack("<BBHII18sH", level, 16, 64, size, 0, b"\0" * 18, 1) + _group_affinity(group, mask)
    return struct.pack("<II", RELATION_CACHE, 8 + len(body)) + body


def _records() -> bytes:
    out = b""
    for sock in range(2):
        base = 8 * sock
        for core in range(4):
            out += _processor(RELATION_CORE, True, 0, 0b11 << (base + 2 * core))
        out += _processor(RELATION_PACKAGE, False, 0, 0xFF << base)
        out += _numa(sock, 0, 0xFF << base)
        out += _cache(3, 32 * 2**20, 0, 0xFF << base)
    return out


class FakeKernel32:
    """Kernel32Api's methods, answering as a 2-node Windows machine would."""

    def __init__(self, avail=(200 * GIB, 180 * GIB)) -> None:
        self.avail = avail
        self.calls: list[str] = []

    def highest_numa_node(self) -> int:
        self.calls.append("GetNumaHighestNodeNumber")
        return 1

    def node_processor_mask(self, node: int) -> tuple[int, int]:
        self.calls.append("GetNumaNodeProcessorMaskEx")
        return 0, 0xFF << (8 * node)

    def node_available_bytes(self, node: int) -> int | None:
        self.calls.append("GetNumaAvailableMemoryNodeEx")
        return self.avail[node]

    def logical_processor_information(self, relation: int = 0xFFFF) -> bytes:
        self.calls.append("GetLogicalProcessorInformationEx")
        return _records()

    def memory_status(self) -> tuple[int, int]:
        return 512 * GIB, 380 * GIB


class FakeNvml:
    """The pynvml calls read_gpus and read_driver_models make, for one RTX PRO 6000 in WDDM."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, i): return f"h{i}"
    def nvmlDeviceGetName(self, h): return "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"total": 96 * GIB, "free": 95 * GIB, "used": GIB})()

    def nvmlDeviceGetPciInfo(self, h): return type("P", (), {"busId": b"00000000:17:00.0"})()
    def nvmlDeviceGetDriverModel(self, h): return (0, 0)  # NVML_DRIVER_WDDM, current and pending

    def __getattr__(self, name):
        if name.startswith("nvmlDevice"):
            def unsupported(*a):
                raise FakeNvml.NVMLError(name)
            return unsupported
        raise AttributeError(name)


CIM_JSON = json.dumps([{"Capacity": 32 * GIB, "Speed": 5600, "ConfiguredClockSpeed": 5200, "SMBIOSMemoryType": 34,
                        "DeviceLocator": f"DIMM {i}"} for i in range(16)])
CPUINFO = {"brand_raw": "INTEL(R) XEON(R) GOLD 6548Y+", "vendor_id_raw": "GenuineIntel",
           "flags": ["avx2", "avx512f", "avx512vnni", "avx512_bf16", "amx_tile", "fma"], "hz_advertised": [2.5e9, 0]}


def _windows_machine(tmp_path, cim=lambda argv: CIM_JSON, api=None):
    return read_machine_windows(api or FakeKernel32(), FakeNvml(), cpu_info=lambda: dict(CPUINFO), cim_run=cim,
                                root=str(tmp_path), system_kwargs={"hostname": "winbox", "os_name": "Windows 11 Pro"})


def test_processor_records_parse_the_documented_layouts():
    recs = parse_processor_records(_records())
    cores = [r for r in recs if r.relationship == RELATION_CORE]
    assert len(cores) == 8 and cores[1].cpus == (2, 3) and all(r.flags == 1 for r in cores)
    nodes = [r for r in recs if r.relationship == RELATION_NUMA]
    assert [(r.node, r.cpus) for r in nodes] == [(0, tuple(range(8))), (1, tuple(range(8, 16)))]
    assert [r.cache_bytes for r in recs if r.relationship == RELATION_CACHE] == [32 * 2**20] * 2
    with pytest.raises(ValueError):
        parse_processor_records(_records() + struct.pack("<II", 0, 4000))


def test_windows_probe_through_the_injected_api(tmp_path):
    api = FakeKernel32()
    m = _windows_machine(tmp_path, api=api)
    p = m.profile
    assert p.os == "windows" and p.system.os == "Windows 11 Pro" and p.system.ram_total_bytes == 512 * GIB
    assert {"GetNumaHighestNodeNumber", "GetNumaAvailableMemoryNodeEx", "GetLogicalProcessorInformationEx"} <= set(api.calls)
    c = p.cpu
    assert (c.n_sockets, c.n_cores, c.n_threads, c.l3_bytes) == (2, 8, 16, 64 * 2**20)
    assert {"avx512_vnni", "avx512_bf16", "amx_tile", "avx2"} <= set(c.isa) and c.source == "win32"
    assert (c.ram_type, c.ram_speed_mts, c.n_dimms, c.memory_source) == ("ddr5", 5200, 16, "cim")
    assert [(n.id, n.cpus, n.n_physical_cores, n.mem_free_bytes, n.mem_total_bytes) for n in p.numa_nodes] == [
        (0, tuple(range(8)), 4, 200 * GIB, 0), (1, tuple(range(8, 16)), 4, 180 * GIB, 0)]
    g = p.gpus[0]
    assert g.vram_bytes == 96 * GIB and g.driver_model == "wddm" and g.numa_node is None
    notes = " ".join(m.notes)
    assert "only each node's available memory" in notes and "GPU NUMA node unknown on Windows" in notes
    assert m.topology.first_cpus((8, 9, 10, 11)) == (8, 10)


def test_windows_probe_says_what_cim_could_not_read(tmp_path):
    def broken(argv):
        assert argv[:3] == ["powershell", "-NoProfile", "-Command"] and "Win32_PhysicalMemory" in argv[3]
        raise OSError(1, "powershell not found")

    m = _windows_machine(tmp_path, cim=broken)
    assert any("CIM (Win32_PhysicalMemory via PowerShell) did not answer" in n for n in m.notes)
    assert m.profile.cpu.memory_source != "cim"


def test_cim_json_of_one_dimm_is_an_object():
    one = json.dumps({"Capacity": 16 * GIB, "Speed": 3200, "ConfiguredClockSpeed": None, "SMBIOSMemoryType": 26})
    (d,) = parse_cim_dimms(one)
    assert (d.size_bytes, d.ram_type, d.speed_mts, d.configured_mts) == (16 * GIB, "ddr4", 3200, None)


# ---- the planner on Windows --------------------------------------------------------------------

def _tune(args, tmp_path):
    out = RUN.invoke(app, ["tune", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["plan"]


@pytest.fixture(scope="module")
def two_socket(tmp_path_factory):
    d = tmp_path_factory.mktemp("hw")
    paths = {}
    for os_name in ("linux", "windows"):
        path = d / f"{os_name}.json"
        r = RUN.invoke(app, ["hardware", "--gpu", "RTX PRO 6000 Blackwell", "--cpu", "Xeon Gold 6548Y+", "--sockets", "2",
                             "--ram", "512G", "--os", os_name, "--out", str(path), "--json"])
        assert r.exit_code == 0, r.output
        paths[os_name] = str(path)
    return paths


def test_windows_what_if_profile_states_numa_cost_and_how_to_bind(two_socket, tmp_path):
    win = _tune(["deepseek-v4-flash", "--size", "151G", "--hw", two_socket["windows"]], tmp_path)
    lin = _tune(["deepseek-v4-flash", "--size", "151G", "--hw", two_socket["linux"]], tmp_path)
    assert win["hardware_os"] == "windows" and lin["hardware_os"] == "linux"
    notes = " ".join(win["notes"])
    assert "start \"\" /B /WAIT /NODE 0 /AFFINITY 0xFFFFFFFFFFFFFFFF" in notes and "--numa has no effect" in notes
    assert "the Windows default (pages spread over the nodes) would decode at" in notes
    # the only Windows policies are the OS default and a start /NODE bind
    assert {a["placement"]["numa"] for a in win["alternatives"]} | {win["placement"]["numa"]} <= {"none", "bind"}
    # WDDM's reserve is in the budget: the Windows plan has less VRAM to spend
    assert "512 MiB of VRAM kept for WDDM" in notes
    assert win["estimate"]["vram_required_bytes"] <= 96 * GIB - WDDM_RESERVE_BYTES
    assert lin["estimate"]["vram_required_bytes"] > win["estimate"]["vram_required_bytes"] - GIB


def test_windows_default_spreads_pages_and_keeps_threads_in_one_group(two_socket):
    from moeplan.planner.cost.estimate import resolve_factors
    from moeplan.probes.hwprofile import read_profile
    from moeplan.profiles.backends import read_priors

    hw = read_profile(two_socket["windows"])
    pr = read_priors("llama.cpp")
    p = Placement(numa="none", n_threads=64, n_gpus=1)
    win = resolve_factors(hw, pr, p)
    lin_interleave = resolve_factors(replace(hw, os="linux"), pr, p.with_(numa="interleave"))
    # half the pages on the far node, as with interleave; but ggml's Windows threads stay in one
    # processor group (<= 64 logical CPUs) when the machine has more: one node's cores read
    assert win.remote_share == pytest.approx(0.5) and "Windows" in win.numa_note
    if sum(len(n.cpus) for n in hw.numa_nodes) > 64:
        assert "processor group" in win.numa_note
        assert win.bw_cpu_bytes_per_s.value < lin_interleave.bw_cpu_bytes_per_s.value
        assert not win.cross_socket
    else:
        assert win.bw_cpu_bytes_per_s.value == pytest.approx(lin_interleave.bw_cpu_bytes_per_s.value)
    small = replace(hw, numa_nodes=tuple(replace(n, cpus=n.cpus[:16]) for n in hw.numa_nodes))
    assert "processor group" not in resolve_factors(small, pr, p).numa_note


def test_tcc_gpu_keeps_no_wddm_reserve(two_socket):
    from moeplan.planner.hardware.windows import reserve_note, vram_reserve_bytes
    from moeplan.probes.hwprofile import read_profile

    hw = read_profile(two_socket["windows"])
    assert vram_reserve_bytes(hw) == WDDM_RESERVE_BYTES
    tcc = replace(hw, gpus=tuple(replace(g, driver_model="tcc") for g in hw.gpus))
    assert vram_reserve_bytes(tcc) == 0 and "TCC" in reserve_note(tcc)
    assert vram_reserve_bytes(replace(hw, os="linux")) == 0


def test_hardware_refuses_an_unknown_os():
    r = RUN.invoke(app, ["hardware", "--cpu", "EPYC 9355", "--ram", "64G", "--os", "macos"])
    assert r.exit_code == 2 and "unknown --os 'macos'" in r.output


# ---- quoting: argv -> script text -> documented tokenizers -> argv --------------------------

NASTY = ["C:\\Program Files\\llama.cpp\\models\\Qwen3 MoE & co.gguf", "100%", "%PATH%", "a^b", "!x!", 'say "hi"',
         "it's", "trailing\\", "dir with space\\", "", "(x|y)<z>", "\u2018curly\u2019", "tab\there", "-ot",
         "^blk\\.(3|[5-9])\\.ffn_(up|down)_exps\\.weight$=CPU", '\\"', "a\\\\\"b", "ünïcode ✓"]


def _launch(argv, bind=None, env=()):
    cmd = Command(parts=((argv[0],), *((a,) for a in argv[1:])), env=env)
    script = Script("launch.sh", "test", cmd)
    return Launch(backend="llama.cpp", target="t", scripts=(script,), os="windows", win_bind=bind), script


def _plan_model(tmp_path_factory=None):
    return _PM


@pytest.fixture(scope="module", autouse=True)
def _pm(tmp_path_factory):
    global _PM
    models = write_models(tmp_path_factory.mktemp("m"))
    m = models["qwen3moe"]
    _PM = (make_plan(m, Placement(cpu_moe_layers=(3, 4))), m)


def _roundtrip_cmd(argv, bind=None):
    plan, m = _PM
    launch, script = _launch(argv, bind)
    text = render_cmd(plan, m, launch, script)
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")
    opts, line = cmd_run_line(text)
    return opts, msvcrt_argv(line), text


def _roundtrip_ps(argv, mode="Standard"):
    plan, m = _PM
    launch, script = _launch(argv)
    text = render_ps1(plan, m, launch, script)
    exe, items = ps_array(text)
    return msvcrt_argv(ps_native_line(exe, items, mode)), text


def test_cmd_carries_the_exact_argv_for_metacharacters():
    argv = ["C:\\llama b1\\llama-server.exe", *NASTY]
    opts, got, text = _roundtrip_cmd(argv)
    assert got == argv and opts == {}
    assert "setlocal DisableDelayedExpansion" in text and text.rstrip().endswith("exit /b %ERRORLEVEL%")


def test_cmd_binds_with_start_node():
    opts, got, _ = _roundtrip_cmd(["llama-server.exe", "-m", "C:\\m\\a b.gguf"], bind=(1, "0xFFFF"))
    assert opts == {"node": 1, "affinity": "0xFFFF"} and got == ["llama-server.exe", "-m", "C:\\m\\a b.gguf"]


def test_cmd_passes_extra_arguments_through():
    plan, m = _PM
    launch, script = _launch(["llama-server.exe", "-c", "4096"])
    _, line = cmd_run_line(render_cmd(plan, m, launch, script), extra="--port 8081")
    assert msvcrt_argv(line) == ["llama-server.exe", "-c", "4096", "--port", "8081"]


def test_cmd_refuses_a_line_break():
    plan, m = _PM
    launch, script = _launch(["llama-server.exe", "a\nb"])
    with pytest.raises(InputError, match="control character"):
        render_cmd(plan, m, launch, script)


def test_powershell_carries_the_exact_argv():
    argv = ["C:\\llama b1\\llama-server.exe", *NASTY, "line\nbreak"]
    got, text = _roundtrip_ps(argv)
    assert got == argv
    assert text.startswith("\ufeff")  # non-ASCII: a BOM so Windows PowerShell 5.1 reads UTF-8
    assert "$PSNativeCommandArgumentPassing = 'Standard'" in text
    assert "Minor -lt 3" in text  # the argv has arguments 5.1 would mangle: the script stops there


def test_powershell_legacy_passing_is_exact_when_the_script_does_not_stop():
    safe = ["llama-server.exe", "-m", "C:\\Program Files\\m\\a & b %x%.gguf", "-ot", "^blk\\.(3|4)\\.x$=CPU", "it's"]
    got, text = _roundtrip_ps(safe, mode="Legacy")
    assert got == safe and "Minor -lt 3" not in text
    assert not any(legacy_unsafe(a) for a in safe[1:])


def test_powershell_bind_delegates_to_launch_cmd():
    plan, m = _PM
    launch, script = _launch(["llama-server.exe", "-c", "1"], bind=(0, "0xFF"))
    text = render_ps1(plan, m, launch, script)
    assert "& (Join-Path $PSScriptRoot 'launch.cmd') @args" in text and "/NODE 0 /AFFINITY 0xFF" in text


ARG = st.text(alphabet=st.sampled_from(list("ab Z09.-_\\/:\"'%^&|<>()!$`@,;=\t\u2018\u2019éü✓")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(ARG, max_size=6))
def test_msvcrt_quote_round_trips(args):
    line = "prog.exe " + " ".join(msvcrt_quote(a) for a in args)
    assert msvcrt_argv(line) == ["prog.exe", *args]


@settings(max_examples=200, deadline=None)
@given(st.lists(ARG, max_size=6), st.booleans())
def test_cmd_round_trips_random_arguments(args, bind):
    argv = ["C:\\x y\\llama-server.exe", *args]
    opts, got, _ = _roundtrip_cmd(argv, bind=(0, "0xF") if bind else None)
    assert got == argv and bool(opts) == bind


@settings(max_examples=200, deadline=None)
@given(st.lists(ARG, max_size=6))
def test_powershell_round_trips_random_arguments(args):
    argv = ["C:\\x y\\llama-server.exe", *args]
    assert _roundtrip_ps(argv)[0] == argv
    if not any(legacy_unsafe(a) for a in args):
        assert _roundtrip_ps(argv, "Legacy")[0] == argv


# ---- golden launch.ps1 / launch.cmd for the launch presets --------------------------------------

def golden_cases():
    from test_launch_golden import CASES

    return {k: v for k, v in CASES.items() if set(v[3]) & {"llama.cpp", "ik_llama.cpp"}}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


def windows_golden_files(models, case):
    """(backend, file) -> bytes of a launch preset's launch.ps1/launch.cmd, and each backend's
    (placement, launch, rendered files) for the test's checks."""
    from test_launch_golden import normalise

    key, path, placement, backends, n_nodes, vram = golden_cases()[case]
    win_path = "C:" + path.replace("/", "\\")
    m = replace(models[key], path=win_path, shards=())
    if placement.numa == "bind":
        placement = placement.with_(options=placement.options.with_(win_affinity_mask="0xFFFFFFFF"))
    plan = make_plan(m, placement)
    files, runs = {}, []
    for backend in [b for b in backends if b in ("llama.cpp", "ik_llama.cpp")]:
        launch = emit_launch(plan, m, backend, n_nodes=n_nodes, gpu_vram_bytes=vram, model_path=win_path,
                             os_family="windows")
        rendered = dict((n, t) for n, t, _ in render_files(plan, m, launch))
        for name in ("launch.ps1", "launch.cmd"):
            files[(backend, name)] = normalise(rendered[name]).encode()
        runs.append((placement, win_path, launch, rendered))
    return files, runs


@pytest.mark.parametrize("case", sorted(golden_cases()))
def test_windows_golden(models, case):
    files, runs = windows_golden_files(models, case)
    for placement, win_path, launch, rendered in runs:
        argv = list(launch.script("launch.sh").command.argv)
        assert argv[0] == "llama-server.exe" and "--numa" not in argv and "numactl --" not in rendered["launch.sh"]
        opts, line = cmd_run_line(rendered["launch.cmd"], env={"MODEL": win_path})
        assert msvcrt_argv(line) == argv
        assert opts == ({"node": placement.numa_nodes[0], "affinity": "0xFFFFFFFF"} if placement.numa == "bind" else {})
        if placement.numa != "bind":
            exe, items = ps_array(rendered["launch.ps1"])
            assert msvcrt_argv(ps_native_line(exe, items)) == argv
    assert_golden(GOLDEN / case, files)


def test_emit_windows_writes_ps1_and_cmd_beside_the_bash_files(two_socket, tmp_path):
    plan_file = tmp_path / "plan.json"
    r = RUN.invoke(app, ["tune", "qwen3-30b-a3b", "--hw", two_socket["windows"], "--out", str(plan_file)])
    assert r.exit_code == 0, r.output
    out = RUN.invoke(app, ["emit", str(plan_file), "--out", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {"launch.sh", "launch.ps1", "launch.cmd"} <= set(names)
    lin = RUN.invoke(app, ["emit", str(plan_file), "--os", "linux", "--out", str(tmp_path / "lin")])
    assert lin.exit_code == 0 and not (tmp_path / "lin" / "launch.cmd").exists()
    vllm = RUN.invoke(app, ["emit", str(plan_file), "--backend", "vllm", "--gpu-vram", "96G", "--out",
                            str(tmp_path / "v"), "--json"])
    assert vllm.exit_code == 0 and "no native Windows build" in vllm.stdout
    bad = RUN.invoke(app, ["emit", str(plan_file), "--os", "beos", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "unknown --os" in bad.output


# ---- moeplan on a simulated Windows -------------------------------------------------------------

def test_moeplan_imports_and_plans_on_simulated_win32(monkeypatch, tmp_path, two_socket):
    import importlib

    monkeypatch.setattr(sys, "platform", "win32")
    for name in [n for n in sys.modules if n == "moeplan" or n.startswith("moeplan.")]:
        monkeypatch.delitem(sys.modules, name)
    cli = importlib.import_module("moeplan.cli")
    r = RUN.invoke(cli.app, ["tune", "gpt-oss-20b", "--hw", two_socket["windows"], "--emit", str(tmp_path / "w")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "w" / "launch.cmd").exists() and "start" in r.output
    assert __version__
