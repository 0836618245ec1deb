"""Tokenizers written from the documented Windows rules, to read back what launch.cmd and
launch.ps1 hand to the program (independent of moeplan/launch/winscripts.py's quoting code).

- msvcrt_argv: how a program built with the MSVC runtime (CommandLineToArgvW rules) splits its
  command line (Microsoft Learn, "Parsing C command-line arguments"), argv[0] by its own rule.
- cmd_run_line: what cmd.exe makes of one (continued) batch command: %% -> %, %* -> the extra
  arguments, %NAME% -> the environment; then outside double quotes ^ escapes the next character
  and & | < > ( ) are operators (an unescaped one is an error here); a " toggles quoting; a
  line ending in ^ continues on the next line. `start "title" /B /WAIT /NODE n /AFFINITY m`
  is split off.
- ps_array: PowerShell's single-quoted literals in an @( ... ) array ('' and the typographic
  single quotes doubled), and ps_native_line: PowerShell 7.3 'Standard' argument passing
  (each argument quoted by the MSVCRT rules, .NET's PasteArguments), or 5.1 'Legacy' passing
  (whitespace -> wrapped in quotes without escaping, empty arguments dropped).
"""
from __future__ import annotations

import re

PS_QUOTES = "'\u2018\u2019\u201a\u201b"


def msvcrt_argv(line: str) -> list[str]:
    i, n = 0, len(line)
    # argv[0]: up to the next quote if it starts with one, else up to whitespace; no escapes
    if i < n and line[i] == '"':
        j = line.index('"', 1)
        args = [line[1:j]]
        i = j + 1
    else:
        j = i
        while j < n and line[j] not in " \t":
            j += 1
        args = [line[i:j]]
        i = j
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            return args
        cur: list[str] = []
        inq = False
        while i < n:
            c = line[i]
            if c in " \t" and not inq:
                break
            if c == "\\":
                j = i
                while j < n and line[j] == "\\":
                    j += 1
                nb = j - i
                if j < n and line[j] == '"':
                    cur.append("\\" * (nb // 2))
                    if nb % 2:
                        cur.append('"')
                        i = j + 1
                    else:
                        i = j
                else:
                    cur.append("\\" * nb)
                    i = j
                continue
            if c == '"':
                if inq and i + 1 < n and line[i + 1] == '"':
                    cur.append('"')
                    i += 2
                    continue
                inq = not inq
                i += 1
                continue
            cur.append(c)
            i += 1
        args.append("".join(cur))


def _percent(text: str, extra: str, env: dict[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "%":
            out.append(c)
            i += 1
        elif text.startswith("%%", i):
            out.append("%")
            i += 2
        elif text.startswith("%*", i):
            out.append(extra)
            i += 2
        else:
            m = re.match(r"%([A-Za-z_][A-Za-z0-9_]*)%", text[i:])
            if not m:
                raise ValueError(f"stray % at {i}: {text[i:i + 20]!r}")
            out.append(env.get(m.group(1), ""))
            i += m.end()
    return "".join(out)


def cmd_run_line(script: str, extra: str = "", env: dict[str, str] | None = None) -> tuple[dict, str]:
    """The command of a launch.cmd (the `start` or program line and its continuations) as
    ({start options}, command line the program receives)."""
    lines = script.replace("\r\n", "\n").split("\n")
    start = next(k for k, ln in enumerate(lines) if ln.startswith(("start ", '"')) or ln.endswith(".exe ^")
                 or re.match(r"^[A-Za-z0-9_.:\\-]+\.exe\b", ln))
    out: list[str] = []
    inq = False
    k = start
    while True:
        text = _percent(lines[k], extra, env or {})
        i, cont = 0, False
        while i < len(text):
            c = text[i]
            if c == '"':
                inq = not inq
                out.append(c)
            elif not inq and c == "^":
                if i + 1 == len(text):
                    cont = True
                    break
                out.append(text[i + 1])
                i += 1
            elif not inq and c in "&|<>()":
                raise ValueError(f"unescaped {c!r} outside quotes in line {k}: {lines[k]!r}")
            else:
                out.append(c)
            i += 1
        if not cont:
            break
        k += 1
    line = "".join(out)
    opts: dict = {}
    m = re.match(r'^start "[^"]*" /B /WAIT /NODE (\d+) /AFFINITY (0x[0-9A-Fa-f]+) ', line)
    if m:
        opts = {"node": int(m.group(1)), "affinity": m.group(2)}
        line = line[m.end():]
    return opts, line


def ps_array(script: str) -> tuple[str, list[str]]:
    """($exe, [$argv elements]) of a launch.ps1, read with PowerShell's single-quote rules."""
    def literal(text: str, i: int) -> tuple[str, int]:
        assert text[i] in PS_QUOTES, text[i:i + 20]
        i += 1
        out = []
        while True:
            c = text[i]
            if c in PS_QUOTES:
                if i + 1 < len(text) and text[i + 1] in PS_QUOTES:
                    out.append(text[i + 1])
                    i += 2
                    continue
                return "".join(out), i + 1
            out.append(c)
            i += 1

    text = script.lstrip("\ufeff")
    m = re.search(r"^\$exe = ", text, re.M)
    exe, _ = literal(text, m.end())
    i = text.index("$argv = @(") + len("$argv = @(")
    items = []
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == ")":
            return exe, items
        val, i = literal(text, i)
        items.append(val)


def ps_native_line(exe: str, args: list[str], mode: str = "Standard") -> str:
    """The command line PowerShell builds for a native program."""
    def standard(a: str) -> str:
        if a and not any(c in a for c in ' \t\n\v"'):
            return a
        out, nb = ['"'], 0
        for c in a:
            if c == "\\":
                nb += 1
                continue
            out.append("\\" * (2 * nb + 1) + '"' if c == '"' else "\\" * nb + c)
            nb = 0
        out.append("\\" * (2 * nb) + '"')
        return "".join(out)

    def legacy(a: str) -> str | None:
        if a == "":
            return None
        return f'"{a}"' if any(c in a for c in " \t") else a

    conv = standard if mode == "Standard" else legacy
    parts = [f'"{exe}"' if " " in exe else exe] + [x for x in (conv(a) for a in args) if x is not None]
    return " ".join(parts)
