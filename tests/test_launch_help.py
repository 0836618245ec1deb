"""--help parsing against recorded and hand-written help texts, and flags chosen per build."""
from __future__ import annotations

from pathlib import Path

import pytest
from launch_plans import make_plan, write_models

from moeplan.errors import InputError, RunnerError
from moeplan.launch import emit_launch, find_programs, ikllama, ktransformers, llamacpp, release_programs, sglang, vllm
from moeplan.launch.binaries import Programs
from moeplan.launch.flags import bad_values, missing_flags, parse_help
from moeplan.planner.options import PlanOptions
from moeplan.planner.placement import Placement

HELP = Path(__file__).parent / "data" / "help"
REAL = HELP / "llama.cpp-0c1e570"
OLD = HELP / "llama.cpp-mid2025-handwritten"
IK = HELP / "ik_llama.cpp-8337e4cd3"  # -fa on|off|auto, only -no-fmoe
IK_863 = HELP / "ik_llama.cpp-41d6c42b9"  # PR #863: only -no-fa and -no-fmoe
IK_OLD = HELP / "ik_llama.cpp-70c0095e1"  # before #863: -fa and -fmoe switches
IK_TOOLS = {"server": "llama-server", "once": "llama-cli", "bench": "llama-bench"}


def flags_of(path: Path, program: str):
    return parse_help(path.read_text(), program, f"--help of {program}", version=path.parent.name)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_models(tmp_path_factory.mktemp("models"))


def test_real_help_parses_into_the_flags_llama_cpp_defines():
    server = flags_of(REAL / "llama-server.txt", "llama-server")
    assert server.arg("-lm") == "MODE" and server.arg("--load-mode") == "MODE"
    assert server.arg("-fa") == "[on|off|auto]" and server.arg("-fit") == "[on|off]"
    assert server.arg("-ngl") == "N" and server.has("--gpu-layers") and server.has("--n-gpu-layers")
    assert server.arg("--no-op-offload") == "" and server.has("--op-offload")
    assert server.arg("-ot") == "<tensor name pattern>=<buffer type>,..."
    assert server.has("-ctkd") and server.has("--spec-draft-type-k")  # long alias listed first
    assert not server.has("--no-mmap") and not server.has("--mlock")  # gone in favour of -lm
    assert not server.has("-no-cnv")
    bench = flags_of(REAL / "llama-bench.txt", "llama-bench")
    assert bench.arg("-ot") == "<tensor name pattern>=<buffer type>;..."
    assert bench.has("--override-tensor") and bench.arg("-nopo") == "<0|1>" and not bench.has("-fit")
    completion = flags_of(REAL / "llama-completion.txt", "llama-completion")
    assert completion.has("-no-cnv") and completion.has("--no-conversation")


def test_description_lines_are_not_flags():
    text = ("-x,    --xx N                           does x\n"
            "                                        --not-a-flag in a description\n"
            "  - auto: a bullet\n")
    fs = parse_help(text, "p", "s")
    assert set(fs.flags) == {"-x", "--xx"}
    with pytest.raises(InputError):
        parse_help("no flags here\n", "p", "s")


@pytest.mark.parametrize("tool,program", [("server", "llama-server"), ("once", "llama-completion"),
                                          ("bench", "llama-bench")])
def test_release_table_agrees_with_the_recorded_help(tool, program):
    """moeplan's table of llama.cpp 0c1e570 says exactly what that build's --help says."""
    real = flags_of(REAL / f"{program}.txt", program)
    table = llamacpp.release_flags()[tool]
    for flag, placeholder in table.flags.items():
        assert real.has(flag), flag
        assert real.arg(flag) == placeholder, (flag, real.arg(flag), placeholder)
    assert llamacpp.LLAMA_CPP_RELEASE.startswith("llama.cpp 0.5.0-dev, commit 0c1e570")


def _programs_from(folder: Path, once: str, ik: bool = False) -> Programs:
    names = {"server": "llama-server", "once": once, "bench": "llama-bench"}
    return Programs(programs=names, flags={t: flags_of(folder / f"{n}.txt", n) for t, n in names.items()})


def test_current_build_gets_load_mode_fit_and_valued_flash_attention(models):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(cpu_moe_layers=(1, 2), load_mode="mlock", op_offload=False))
    launch = emit_launch(plan, m, "llama.cpp", _programs_from(REAL, "llama-completion"), model_path="/m.gguf")
    argv = launch.script("launch.sh").command.argv
    assert argv[argv.index("-lm"):argv.index("-lm") + 2] == ("-lm", "mlock")
    assert "-fit" in argv and argv[argv.index("-fa") + 1] == "on" and "--no-op-offload" in argv
    bench = launch.script("bench.sh").command.argv
    assert bench[bench.index("-nopo") + 1] == "1" and bench[bench.index("-lm") + 1] == "mlock"


def test_older_build_gets_no_mmap_mlock_bare_fa_and_llama_cli(models):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(cpu_moe_layers=(1, 2), load_mode="mlock"))
    launch = emit_launch(plan, m, "llama.cpp", _programs_from(OLD, "llama-cli"), model_path="/m.gguf")
    argv = launch.script("launch.sh").command.argv
    assert "-lm" not in argv and "-fit" not in argv
    assert "--no-mmap" in argv and "--mlock" in argv
    assert argv[argv.index("-fa") + 1] == "-ctk"  # a switch there
    once = launch.script("complete.sh").command.argv
    assert once[0] == "llama-cli" and "-no-cnv" in once
    bench = launch.script("bench.sh").command.argv
    assert bench[bench.index("-mmp") + 1] == "0" and bench[bench.index("-fa") + 1] == "1"
    assert any("has no --fit" in n for n in launch.notes)
    # every flag of every command is one that build lists
    for s in launch.scripts:
        fs = _programs_from(OLD, "llama-cli").flags[{"launch.sh": "server", "complete.sh": "once",
                                                       "bench.sh": "bench"}[s.name]]
        assert missing_flags(s.command.argv, fs) == []


def test_older_build_drafts_with_draft_max(models):
    m = models["qwen3moe"]
    plan = make_plan(m, Placement(n_draft=4, draft_accept=0.7, options=PlanOptions(draft_model="/d/small.gguf")))
    argv = emit_launch(plan, m, "llama.cpp", _programs_from(OLD, "llama-cli"),
                       model_path="/m.gguf").script("launch.sh").command.argv
    assert argv[argv.index("--draft-max"):argv.index("--draft-max") + 2] == ("--draft-max", "4")
    assert "-md" in argv and "--spec-type" not in argv


def test_a_flag_the_build_lacks_is_a_clear_error(models):
    m = models["qwen3moe"]
    cache = make_plan(m, Placement(cpu_moe_layers=(1,), gpu_expert_cache_bytes=2 * 1024**3))
    with pytest.raises(InputError) as err:
        emit_launch(cache, m, "llama.cpp", _programs_from(REAL, "llama-completion"), model_path="/m.gguf")
    assert "--moe-cache-mib" in err.value.message and err.value.hint
    # the default target (no binary) is the same release, so the same error
    with pytest.raises(InputError, match="--moe-cache-mib"):
        emit_launch(cache, m, "llama.cpp", model_path="/m.gguf")
    mtp = make_plan(models["deepseek2"], Placement(n_draft=2))
    with pytest.raises(InputError, match="no --spec-type"):
        emit_launch(mtp, models["deepseek2"], "llama.cpp", _programs_from(OLD, "llama-cli"), model_path="/m.gguf")


def _ik_programs(folder: Path) -> Programs:
    flags = {}
    for tool, name in IK_TOOLS.items():
        flags[tool] = ikllama.with_parser_flags(flags_of(folder / f"{name}.txt", name), bench=tool == "bench")[0]
    return Programs(programs=dict(IK_TOOLS), flags=flags)


def _parser_args(folder: Path, tool: str) -> set[str]:
    name = "parser-args-llama-bench.txt" if tool == "bench" else "parser-args-common.txt"
    return {line for line in (folder / name).read_text().splitlines() if line and not line.startswith("#")}


@pytest.mark.parametrize("folder,fa,fmoe", [
    (IK, ("-fa", "on"), None),
    (IK_863, None, None),
    (IK_OLD, ("-fa",), ("-fmoe",)),
])
def test_ik_help_drives_ik_flags(models, folder, fa, fmoe):
    """Each ik release gets its own spelling of flash attention and fused MoE, and every flag
    of every command is one its help lists or its parser takes (read from that commit)."""
    m = models["deepseek2"]
    plan = make_plan(m, Placement(backend="ik_llama.cpp", cpu_moe_layers=(2, 3), load_mode="no-mmap", n_ubatch=512))
    progs = _ik_programs(folder)
    launch = emit_launch(plan, m, "ik_llama.cpp", progs, model_path="/m.gguf")
    argv = launch.script("launch.sh").command.argv
    i = argv.index("-ctk")
    assert tuple(argv[argv.index("-c") + 2:i]) == (fa or ())  # what stands between -c N and -ctk
    assert ("-fmoe" in argv) == bool(fmoe) and "-no-fmoe" not in argv and "-no-fa" not in argv
    assert argv[argv.index("-mla") + 1] == "3" and "-amb" not in argv and "-rtr" not in argv
    assert "--no-mmap" in argv and "-ncmoe" not in argv and "-lm" not in argv
    bench = launch.script("bench.sh").command.argv
    assert bench[bench.index("-fa") + 1] == "1" and bench[bench.index("-fmoe") + 1] == "1"
    for s in launch.scripts:
        tool = {"launch.sh": "server", "complete.sh": "once", "bench.sh": "bench"}[s.name]
        assert missing_flags(s.command.argv, progs.flags[tool]) == [], (folder.name, s.name)
        assert bad_values(s.command.argv, progs.flags[tool]) == [], (folder.name, s.name)
        used = {t for t in map(str, s.command.argv[1:]) if t.startswith("-") and not t[1:2].isdigit()}
        assert used <= _parser_args(folder, tool), (folder.name, s.name, used - _parser_args(folder, tool))


@pytest.mark.parametrize("tool", sorted(IK_TOOLS))
def test_ik_release_table_agrees_with_its_help(tool):
    """moeplan's table of ik 8337e4cd3 says what that commit's --help says."""
    helped = flags_of(IK / f"{IK_TOOLS[tool]}.txt", IK_TOOLS[tool])
    for flag, placeholder in ikllama.release_flags()[tool].flags.items():
        assert helped.has(flag), (tool, flag)
        if tool == "bench" and flag in ikllama.BENCH_HELP_CORRECTIONS:  # stale in the help, read from the parser
            assert helped.arg(flag) == "<0|1|2>" and placeholder == "<0|1|2|3>"
            continue
        assert helped.arg(flag) == placeholder, (tool, flag, helped.arg(flag), placeholder)
    assert ikllama.IK_RELEASE.startswith("ik_llama.cpp commit 8337e4cd3")


def test_ik_parser_only_flags_are_in_every_recorded_parser():
    for folder in (IK, IK_863, IK_OLD):
        assert set(ikllama.PARSER_ONLY) <= _parser_args(folder, "server"), folder.name
    # what the help of 70c0095e1 leaves out, and the parser still takes
    old = flags_of(IK_OLD / "llama-server.txt", "llama-server")
    assert not old.has("-ot") and not old.has("-rtr") and old.has("--run-time-repack")
    fs, added = ikllama.with_parser_flags(old)
    assert {"-ot", "-rtr", "-op"} <= set(added) and fs.arg("-ot") == "NAME"


def test_ik_help_fixtures_say_how_they_were_made():
    for folder in (IK, IK_863, IK_OLD):
        for name in IK_TOOLS.values():
            first = (folder / f"{name}.txt").read_text().splitlines()[0]
            assert first.startswith(("# reconstructed from source at commit ", "# recorded from a build")), first
            assert folder.name.split("-")[-1] in first


def test_ik_help_layouts_parse():
    server = flags_of(IK / "llama-server.txt", "llama-server")
    assert server.arg("-fa") == "(auto|on|off|0|1)" and server.takes_value("-fa", "on")
    assert server.has("-no-fmoe") and not server.has("-fmoe") and server.arg("-mla") == ""
    assert server.arg("-op") == "POLICY" and server.has("--n-cpu-moe") and server.has("--spec-type")
    bench = flags_of(IK / "llama-bench.txt", "llama-bench")
    assert bench.arg("-sm") == "<none|layer|graph>"  # its default is glued on: not the placeholder
    assert bench.arg("-fmoe") == "<0|1>" and bench.arg("-ot") == "pattern" and not bench.has("-op")
    old = flags_of(IK_OLD / "llama-server.txt", "llama-server")
    assert old.arg("-fa") == "" and old.has("-fmoe") and not old.has("--spec-type") and old.has("--draft")


SG = HELP / "sglang-0.5.23"
VL = HELP / "vllm-0.33.0"
RECORDED = {  # backend -> the recorded help of the release its tables target
    "vllm": {"server": VL / "serve.txt", "bench": VL / "bench-serve.txt"},
    "sglang": {"server": SG / "launch_server.txt", "bench": SG / "bench_serving.txt"},
    "ktransformers": {"server": SG / "launch_server.txt", "bench": SG / "bench_serving.txt"},
}
RELEASE_NAMES = {"sglang": "SGLang 0.5.23", "ktransformers": "SGLang 0.5.23", "vllm": "vLLM 0.33.0"}


@pytest.mark.parametrize("backend,module", [("sglang", sglang), ("ktransformers", ktransformers), ("vllm", vllm)])
def test_server_backend_tables_match_their_recorded_help(backend, module):
    for tool, fs in module.release_flags().items():
        helped = flags_of(RECORDED[backend][tool], tool)
        for flag, placeholder in fs.flags.items():
            assert helped.has(flag), (backend, tool, flag)
            assert helped.arg(flag) == placeholder, (backend, tool, flag, helped.arg(flag), placeholder)


SERVER_PLANS = [  # (model key, placement, n_nodes)
    ("qwen3moe", Placement(backend="sglang", n_ctx=32768, n_seq=8, n_gpus=4), 1),
    ("deepseek2", Placement(backend="sglang", n_ctx=65536, n_seq=4, n_gpus=8, cache_type_k="q8_0",
                            cache_type_v="q8_0"), 2),
    ("qwen3moe", Placement(cpu_moe_layers=(1, 2, 3), n_ctx=16384, n_threads=16, numa="bind", numa_nodes=(0,)), 1),
    ("deepseek2", Placement(cpu_moe_layers=(2, 3, 4, 5, 6), n_ctx=8192, cache_type_k="q8_0", cache_type_v="q8_0",
                            options=PlanOptions(kt_method="AMXINT4", kt_weight_path="/w")), 1),
]


@pytest.mark.parametrize("backend", sorted(RECORDED))
@pytest.mark.parametrize("case", range(len(SERVER_PLANS)))
def test_emitted_server_flags_exist_in_the_recorded_help(models, backend, case):
    """Every flag of every command, and every value of a flag with choices, is one the recorded
    help of the release named in the scripts' header lists."""
    key, placement, n_nodes = SERVER_PLANS[case]
    m = models[key]
    if backend != "ktransformers" and placement.cpu_moe_layers:
        placement = Placement(**{**placement.__dict__, "cpu_moe_layers": ()})
    if backend != "ktransformers" and n_nodes == 1 and placement.n_gpus < 2:
        placement = Placement(**{**placement.__dict__, "n_gpus": 2})
    if backend == "ktransformers":
        n_nodes = 1
    try:
        launch = emit_launch(make_plan(m, placement), m, backend, n_nodes=n_nodes, gpu_vram_bytes=80 * 1024**3,
                             model_path="/m")
    except InputError as err:  # a plan a backend refuses (too big for its GPUs) has nothing to check
        pytest.skip(f"{backend} refuses the plan: {err.message}")
    assert RELEASE_NAMES[backend] in launch.target
    helped = {tool: flags_of(path, tool) for tool, path in RECORDED[backend].items()}
    n = 0
    for s in launch.scripts:
        argv = [str(t) for t in s.command.argv]
        if "sglang.launch_server" in argv:
            fs, start = helped["server"], argv.index("sglang.launch_server") + 1
        elif "sglang.bench_serving" in argv:
            fs, start = helped["bench"], argv.index("sglang.bench_serving") + 1
        elif argv[:2] == ["vllm", "serve"]:
            fs, start = helped["server"], 3  # vllm serve MODEL --flags
        elif argv[:3] == ["vllm", "bench", "serve"]:
            fs, start = helped["bench"], 3
        else:
            continue
        assert missing_flags(argv, fs, start=start) == [], (s.name, argv)
        assert bad_values(argv, fs, start=start) == [], (s.name, argv)
        n += 1
    assert n >= 2
    for c in launch.configs:  # vllm.yaml: each key is a serve flag, each value a choice it lists
        if c.name == "vllm.yaml":
            for line in c.text.splitlines():
                if line.startswith("#"):
                    continue
                key, _, val = line.partition(": ")
                assert helped["server"].has("--" + key), key
                assert bad_values(["--" + key, val.strip('"')], helped["server"], start=0) == [], (key, val)


def test_kt_methods_are_kt_kernels():
    """--kt-method takes what kt-kernel 0.7.2 serves with (kt_kernel/experts.py)."""
    methods = {line for line in (HELP / "kt-kernel-0.7.2" / "inference-methods.txt").read_text().splitlines()
               if line and not line.startswith("#")}
    assert {"LLAMAFILE", "AMXINT4", "AMXINT8"} <= methods
    assert set(ktransformers.NATIVE_KT_METHOD.values()) <= methods
    assert ktransformers.KT_RELEASE.startswith("kt-kernel 0.7.2")


def test_choices_are_checked():
    fs = parse_help("  --kv-cache-dtype {auto,fp8}\n  -fa, --flash-attn <0|1>   x\n  -n N  y\n", "p", "s")
    assert bad_values(["p", "--kv-cache-dtype", "fp8", "-fa", "1", "-n", "7"], fs) == []
    assert bad_values(["p", "--kv-cache-dtype", "q8_0", "-fa", "0,2"], fs) == [("--kv-cache-dtype", "q8_0"),
                                                                                ("-fa", "0,2")]
    vl = parse_help("  --kv-cache-dtype ['auto', 'fp8']\n", "vllm serve", "s")
    assert bad_values(["x", "--kv-cache-dtype", "fp8"], vl) == [] and bad_values(["x", "--kv-cache-dtype", "q8"], vl)


# ---- finding programs: PATH, --bin, flavour -----------------------------------------------

def _reader(mapping: dict[str, str]):
    def read(argv):
        if argv[-1] == "--version":
            return "version: test (build 1, commit abc)"
        return mapping[Path(argv[0]).name]
    return read


def test_programs_on_path_are_used_by_name_with_their_help():
    texts = {n: (REAL / f"{n}.txt").read_text() for n in ("llama-server", "llama-completion", "llama-bench")}
    progs = find_programs("llama.cpp", None, which=lambda n: f"/usr/bin/{n}" if n in texts else None,
                          reader=_reader(texts))
    assert progs.programs == {"server": "llama-server", "once": "llama-completion", "bench": "llama-bench"}
    assert all(fs.from_help for fs in progs.flags.values())
    assert progs.flags["server"].version.startswith("version: test")


def test_nothing_on_path_falls_back_to_the_release_table():
    progs = find_programs("llama.cpp", None, which=lambda n: None, reader=_reader({}))
    assert progs.flags == release_programs("llama.cpp").flags
    assert progs.programs["once"] == "llama-completion"


def test_bin_folder_with_an_ik_build_is_refused_for_llama_cpp(tmp_path):
    for n in ("llama-server", "llama-cli", "llama-bench"):
        (tmp_path / n).write_text("")
    texts = {n: (IK / f"{n}.txt").read_text() for n in ("llama-server", "llama-cli", "llama-bench")}
    with pytest.raises(InputError, match="ik_llama.cpp build") as err:
        find_programs("llama.cpp", str(tmp_path), reader=_reader(texts))
    assert "--backend ik_llama.cpp" in err.value.hint
    progs = find_programs("ik_llama.cpp", str(tmp_path), reader=_reader(texts))
    assert progs.programs["server"] == str(tmp_path / "llama-server")
    with pytest.raises(InputError, match="no such file"):
        find_programs("llama.cpp", str(tmp_path / "missing"))


def test_old_bin_folder_uses_llama_cli_for_one_shot_runs(tmp_path):
    for n in ("llama-server", "llama-cli", "llama-bench"):
        (tmp_path / n).write_text("")
    texts = {n: (OLD / f"{n}.txt").read_text() for n in ("llama-server", "llama-cli", "llama-bench")}
    progs = find_programs("llama.cpp", str(tmp_path), reader=_reader(texts))
    assert Path(progs.programs["once"]).name == "llama-cli"


def test_sglang_without_kt_flags_is_refused_for_ktransformers(tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    plain = "\n".join(line for line in (SG / "launch_server.txt").read_text().splitlines()
                      if "--kt-" not in line)
    texts = {"launch_server": plain, "bench_serving": (SG / "bench_serving.txt").read_text()}

    def read(argv):
        return texts[argv[2].split(".")[1]]
    with pytest.raises(InputError, match="--kt-method"):
        find_programs("ktransformers", str(python), reader=read)
    assert find_programs("sglang", str(python), reader=read).flags["server"].has("--tp-size")


def _fake_ik_program(path: Path, help_text: str, rc: int) -> None:
    """A shell program that prints `help_text` for --help on stdout and exits `rc`, as ik's
    llama-server does (exit 1), and its version on stderr."""
    (path.parent / (path.name + ".help")).write_text(help_text)
    path.write_text("#!/bin/sh\n"
                    'if [ "$1" = "--version" ]; then echo "version: 1 (8337e4cd3)" >&2; exit 0; fi\n'
                    f'cat "$0.help"; exit {rc}\n')
    path.chmod(0o755)


def test_ik_help_is_read_whatever_its_exit_code(tmp_path):
    for name in IK_TOOLS.values():
        _fake_ik_program(tmp_path / name, (IK / f"{name}.txt").read_text(), 1 if name != "llama-bench" else 0)
    progs = find_programs("ik_llama.cpp", str(tmp_path))
    assert all(fs.from_help for fs in progs.flags.values())
    assert progs.flags["server"].takes_value("-fa", "on") and progs.flags["server"].version == "version: 1 (8337e4cd3)"
    assert progs.notes == ()  # a GPU build's help lists -ot, -rtr, -op and -ngl itself
    # a program that prints nothing and fails is still an error
    (tmp_path / "llama-server.help").write_text("")
    with pytest.raises(RunnerError, match="llama-server --help exited with 1"):
        find_programs("ik_llama.cpp", str(tmp_path))


def test_ik_cpu_only_build_gets_the_gpu_flags_its_parser_takes(tmp_path):
    """A CPU-only build's help has no GPU section (no -ngl); its parser still takes -ngl."""
    for name in IK_TOOLS.values():
        text = (IK / f"{name}.txt").read_text()
        if name != "llama-bench":
            text = "\n".join(line for line in text.splitlines()
                             if not line.lstrip().startswith(("-ngl", "-ts", "-sm", "-mg", "-op")))
        _fake_ik_program(tmp_path / name, text, 1)
    progs = find_programs("ik_llama.cpp", str(tmp_path))
    assert progs.flags["server"].has("-ngl") and progs.flags["once"].has("-op")
    assert any("--help does not list -op -ngl -ts -sm -mg;" in n and "CPU-only build ignores -ngl" in n
               for n in progs.notes)
