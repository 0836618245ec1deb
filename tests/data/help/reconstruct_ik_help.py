"""Rebuild ik_llama.cpp's `--help` text from its source, for commits no build was made of.

    python tests/data/help/reconstruct_ik_help.py SRC COMMIT OUT_DIR [--cpu-only]

SRC is a checkout (or `git archive`) of ikawrakow/ik_llama.cpp at COMMIT. Writes
OUT_DIR/llama-server.txt, llama-cli.txt (common/common.cpp, gpt_params_print_usage: both
programs print the same option table) and llama-bench.txt (examples/llama-bench, print_usage),
each starting with a `# reconstructed from source at commit COMMIT` line, and
parser-args-common.txt / parser-args-llama-bench.txt: every `arg == "-x"` the argument
parsers compare against (the programs accept flags their help does not list).

How the programs print, and how this follows it:
  * common.cpp collects `options.push_back({tags, args, desc, fmt args...})` and prints each
    as `printf("  %-32s", args)`, a newline plus 34 spaces when args is longer than 30
    characters, then the description, continuation lines indented 34. Groups `{ "name" }`
    print as "\\nname:\\n". Blocks under `if (llama_supports_gpu_offload())` appear only in
    GPU builds (left out with --cpu-only); `if (params.sweep_bench)` blocks are left out (off
    by default); mlock/mmap blocks are kept (Linux supports both).
  * llama-bench prints its usage with one `printf` per line.
  * Defaults are printed at run time from `params`; here a printf conversion is replaced by
    the C expression it would print, in angle brackets (`(default: <params.mla_attn>)`).
    Flag names and placeholders, which is what moeplan reads, are verbatim.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
_CONV = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:l|ll|z|h)?[diufgeEsxXc]|%%")


def _unescape(s: str) -> str:
    return (s.replace("\\n", "\n").replace('\\"', '"').replace("\\'", "'").replace("\\t", "\t")
            .replace("\\\\", "\\"))


def _split_top(text: str) -> list[str]:
    """Split on commas outside strings, parentheses and braces."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            m = _STR.match(text, i)
            cur.append(m.group(0))
            i = m.end()
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _literal(expr: str) -> str | None:
    """The value of a (concatenated) C string literal expression, else None."""
    parts = _STR.findall(expr)
    if not parts or _STR.sub("", expr).strip():
        return None
    return _unescape("".join(parts))


def _format(fmt: str, args: list[str]) -> str:
    it = iter(args)

    def sub(m: re.Match) -> str:
        if m.group(0) == "%%":
            return "%"
        a = next(it, "?").strip()
        lit = _literal(a)
        if lit is not None:
            return lit
        return "<" + re.sub(r"\.c_str\(\)$", "", a) + ">"
    return _CONV.sub(sub, fmt)


def _strip_comments(text: str) -> str:
    out = []
    for line in text.splitlines():
        s = line.lstrip()
        out.append("" if s.startswith("//") else line)
    return "\n".join(out)


def _drop_if_blocks(body: str, condition: str) -> str:
    """Remove `if (condition) { ... }` blocks (brace-matched)."""
    while True:
        i = body.find(f"if ({condition})")
        if i < 0:
            return body
        j = body.index("{", i)
        depth, k = 0, j
        while True:
            if body[k] == "{":
                depth += 1
            elif body[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        body = body[:i] + body[k + 1:]


def _function_body(text: str, signature: str) -> str:
    i = text.index(signature)
    j = text.index("{", i)
    depth, k = 0, j
    while True:
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k]
        k += 1


def common_help(src: Path, program: str, cpu_only: bool) -> str:
    body = _function_body(_strip_comments((src / "common/common.cpp").read_text()), "void gpt_params_print_usage(")
    body = _drop_if_blocks(body, "params.sweep_bench")
    if cpu_only:
        body = _drop_if_blocks(body, "llama_supports_gpu_offload()")
    lines = [f"usage: {program} [options]"]
    for m in re.finditer(r"options\.push_back\(\{(.*?)\}\);", body, re.S):
        fields = _split_top(m.group(1))
        if len(fields) == 1:
            lines.append(f"\n{_literal(fields[0])}:\n")
            continue
        args = _literal(fields[1]) or ""
        desc = _format(_literal(fields[2]) or "", fields[3:])
        head = f"  {args:<32}"
        if len(args) > 30:
            head += "\n" + " " * 34
        desc_lines = desc.split("\n")
        text = head + desc_lines[0] + "".join("\n" + " " * 34 + d for d in desc_lines[1:])
        lines.append(text)
    return "\n".join(lines) + "\n\n"


def bench_help(src: Path) -> str:
    text = _strip_comments((src / "examples/llama-bench/llama-bench.cpp").read_text())
    body = _function_body(text, "static void print_usage(")
    out = []
    for m in re.finditer(r"printf\((.*?)\);\s*$", body, re.S | re.M):
        fields = _split_top(m.group(1))
        fmt = _literal(fields[0])
        if fmt is None:
            continue
        args = fields[1:]
        if fmt.startswith("usage: %s"):
            args = ['"llama-bench"']
        out.append(_format(fmt, args))
    return "".join(out)


def parser_args(path: Path) -> list[str]:
    """Every `arg == "-x"` the file compares against, sorted."""
    text = _strip_comments(path.read_text())
    return sorted(set(re.findall(r'arg\s*==\s*"(-[^"]+)"', text)))


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    src, commit, out = Path(argv[0]), argv[1], Path(argv[2])
    cpu_only = "--cpu-only" in argv[3:]
    build = "a CPU-only build" if cpu_only else "a GPU (CUDA) build"
    out.mkdir(parents=True, exist_ok=True)
    head = f"# reconstructed from source at commit {commit} (as {build} prints it), not program output\n"
    for program in ("llama-server", "llama-cli"):
        (out / f"{program}.txt").write_text(head + common_help(src, program, cpu_only))
    (out / "llama-bench.txt").write_text(head + bench_help(src))
    # what the parsers accept, listed in --help or not (older builds leave -ot and -rtr out)
    phead = f"# arguments the parser accepts, read from source at commit {commit}: {{}}\n"
    for name, rel in (("common", "common/common.cpp"), ("llama-bench", "examples/llama-bench/llama-bench.cpp")):
        what = rel + (" (llama-server, llama-cli)" if name == "common" else "")
        (out / f"parser-args-{name}.txt").write_text(phead.format(what) + "\n".join(parser_args(src / rel)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
