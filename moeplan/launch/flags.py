"""Which flags a backend program takes: parsed from its `--help`, or a release's known table.

`parse_help` reads the help layouts of llama.cpp's common args (`-lm,   --load-mode MODE   ...`),
llama-bench (`  -ot --override-tensor <...>`), ik_llama.cpp and argparse-based programs
(vLLM, SGLang: `  --tp-size TP_SIZE, --tensor-parallel-size ...`), ik_llama.cpp's
`-fa, --flash-attn (auto|on|off|0|1)` and its llama-bench's `-sm, --split-mode <a|b>(default: a)`
(the glued default is not part of the placeholder). A flag line starts with
fewer than 12 spaces of indentation followed by `-`; continuation lines of descriptions are
indented further and never count (llama-server's help has `--no-mmproj` in a description).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from moeplan.errors import InputError

_FLAG_TOKEN = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.+-]*")
_MAX_FLAG_INDENT = 12  # ik_llama.cpp indents long-only flags by 9 ("  " + "       --numa")


@dataclass(frozen=True)
class FlagSet:
    """The flags one program accepts.

    flags: flag spelling -> its argument placeholder as the help prints it ('' for a switch),
        e.g. {'-fa': '[on|off|auto]', '--flash-attn': '[on|off|auto]', '--no-op-offload': ''}.
    source: where the table comes from ('--help of /usr/bin/llama-server' or a release name).
    version: the program's version line, when known.
    """

    program: str
    source: str
    flags: dict[str, str] = field(default_factory=dict)
    version: str = ""
    from_help: bool = False

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def arg(self, flag: str) -> str | None:
        return self.flags.get(flag)

    def takes_value(self, flag: str, value: str) -> bool:
        """Whether the placeholder of `flag` lists `value` among its choices (`[on|off|auto]`)."""
        placeholder = self.flags.get(flag) or ""
        return value in re.split(r"[^A-Za-z0-9_+.-]+", placeholder)


def _scan_flag_line(line: str) -> tuple[list[str], str]:
    """(flag names, placeholder) of one flag line; ([], '') when it holds no flag."""
    names: list[str] = []
    placeholder = ""
    pos = 0
    while True:
        m = _FLAG_TOKEN.match(line, pos)
        if not m or (m.end() < len(line) and line[m.end()] not in ", =\t"):
            break
        names.append(m.group(0))
        pos = m.end()
        if line.startswith("=", pos):  # argparse long form: --foo=BAR
            pos += 1
        sep = re.match(r",?[ \t]*", line[pos:]).group(0)  # type: ignore[union-attr]  # matches the empty string
        nxt = pos + len(sep)
        if _FLAG_TOKEN.match(line, nxt) and ("," in sep or sep == " "):
            pos = nxt  # another spelling of the same flag
            continue
        if sep.startswith(" ") and len(sep) == 1 and nxt < len(line):
            # a placeholder: single-spaced words up to two spaces, or ', -' (next spelling)
            m2 = re.match(r"(\S+?(?: \S+?)*?)(?=  |, -|$)", line[nxt:])
            if m2:
                # ik's llama-bench glues its default on: `<none|layer|graph>(default: layer)`
                placeholder = placeholder or re.split(r"(?<=\S)\(default", m2.group(1))[0]
                pos = nxt + m2.end()
                m3 = re.match(r", *", line[pos:])
                if m3 and _FLAG_TOKEN.match(line, pos + m3.end()):
                    pos += m3.end()
                    continue
        break
    return names, placeholder


def parse_help(text: str, program: str, source: str, version: str = "") -> FlagSet:
    """Parse a `--help` text into a FlagSet."""
    flags: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.expandtabs().rstrip()
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) >= _MAX_FLAG_INDENT or not stripped.startswith("-"):
            continue
        names, placeholder = _scan_flag_line(stripped)
        for n in names:
            flags.setdefault(n, placeholder)
    if not flags:
        raise InputError(f"{source}: no flags found in the help text of {program}",
                         "is this the right program? give --bin the build folder or the program itself")
    return FlagSet(program=program, source=source, flags=flags, version=version, from_help=True)


def release_table(release: str, tables: dict[str, tuple[str, dict[str, str]]]) -> dict[str, FlagSet]:
    """FlagSets of a release from hand-written tables: tool -> (program, {flag: placeholder})."""
    return {tool: FlagSet(program=program, source=f"flags of {release}", flags=dict(spec), version=release)
            for tool, (program, spec) in tables.items()}


def target_text(fs: FlagSet, release: str, missing_hint: str) -> str:
    """What the flags were chosen for, in words (the script headers' 'flags for:' line)."""
    if fs.from_help:
        return fs.source + (f" ({fs.version})" if fs.version else "")
    return f"{release} ({missing_hint})"


def missing_flags(argv: list[str] | tuple[str, ...], fs: FlagSet, start: int = 1) -> list[str]:
    """Flags in `argv[start:]` (tokens that start with '-' in a flag position) that `fs` lacks.

    A flag whose placeholder is not empty takes the next token as its value, so a value that
    starts with '-' is not read as a flag. `start` skips the program (`python -m module`).
    """
    missing: list[str] = []
    i = start
    while i < len(argv):
        tok = str(argv[i])
        if tok.startswith("-") and len(tok) > 1 and not _is_number(tok):
            if not fs.has(tok) and tok not in missing:
                missing.append(tok)
            i += 2 if fs.arg(tok) else 1
        else:
            i += 1
    return missing


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def choices(placeholder: str) -> tuple[str, ...]:
    """The values a placeholder enumerates: argparse's `{a,b,c}`, vLLM's `['a', 'b']`, ik's
    `(a|b|c)`, llama.cpp's `[a|b|c]` and `<a|b|c>`; () for a free-form one (`N`, `TYPE`, `<n>`)."""
    ph = placeholder.strip()
    if len(ph) < 3 or ph[0] + ph[-1] not in ("{}", "()", "[]", "<>"):
        return ()
    if ph.startswith("['"):
        return tuple(v.strip().strip("'") for v in ph[1:-1].split(","))
    inner = ph[1:-1]
    sep = "," if ph[0] == "{" else "|"
    if sep not in inner:
        return ()
    return tuple(v.strip() for v in inner.split(sep))


def bad_values(argv: list[str] | tuple[str, ...], fs: FlagSet, start: int = 1) -> list[tuple[str, str]]:
    """(flag, value) pairs in `argv[start:]` whose value is not one of the choices the flag's
    placeholder enumerates (`--kv-cache-dtype {auto,fp8_e5m2}`, `-fa <0|1>`). A flag given
    several values at once (llama-bench's `-fa 0,1`) is checked value by value."""
    bad: list[tuple[str, str]] = []
    i = start
    while i < len(argv):
        tok = str(argv[i])
        placeholder = fs.arg(tok) if tok.startswith("-") else None
        if placeholder and i + 1 < len(argv):
            allowed = choices(placeholder)
            value = str(argv[i + 1])
            if allowed and not all(v in allowed for v in value.split(",")):
                bad.append((tok, value))
            i += 2
        else:
            i += 1
    return bad
