"""launch.ps1 and launch.cmd: the server command of a plan for Windows, quoted so the program
receives exactly the argv the emitter built.

Three sets of rules meet on Windows, each from its documentation:

1. The program's own argv. Windows hands a program one command-line string; llama-server.exe
   (MSVC C runtime) splits it as CommandLineToArgvW does: space/tab separate arguments outside
   double quotes; 2n backslashes before a quote give n backslashes and the quote toggles quoting;
   2n+1 give n backslashes and a literal quote; other backslashes are literal; inside quotes ""
   is a literal quote (Microsoft Learn, "Parsing C command-line arguments"). `msvcrt_quote`
   writes an argument so that `msvcrt_split` (the same rules, in tests/winshell.py too) gives it
   back.
2. cmd.exe (launch.cmd). A batch line is read in phases: first every %...% is expanded, even
   inside quotes, so a literal % is written %%; then, outside double quotes, ^ escapes the next
   character and & | < > ( ) are operators; a " toggles quoting whatever precedes it; a ^ at the
   end of a line continues the command on the next one. Delayed expansion (!) is switched off
   with `setlocal DisableDelayedExpansion`. An argument whose MSVCRT form has only its two
   enclosing quotes is written inside cmd's quotes (only % doubled); one with embedded quotes is
   written without cmd quoting, every special character (the quotes too) escaped with ^, so
   cmd's quote state is never left open at a line end. cmd cannot carry a line break or a NUL in
   an argument: such an argv is refused.
3. PowerShell (launch.ps1). Arguments are single-quoted literals: nothing inside expands, and a
   quote is written twice (PowerShell treats the typographic quotes U+2018-U+201B as single
   quotes too, so they are doubled as well). A splatted array reaches a native program one
   element per argument; PowerShell 7.3+ with $PSNativeCommandArgumentPassing = 'Standard' (set
   by the script) quotes them by rule 1. Windows PowerShell 5.1 ('Legacy') wraps an argument
   with whitespace in quotes without escaping and drops empty ones: when the argv has an
   argument that Legacy passing would change (empty, a double quote, whitespace before a
   trailing backslash), the script stops on PowerShell < 7.3 and says to use pwsh or launch.cmd.

A plan that binds a NUMA node runs under `start "" /B /WAIT /NODE n /AFFINITY mask` in
launch.cmd (planner/hardware/windows.py); PowerShell has no way to give a new process a
preferred NUMA node, so launch.ps1 then calls launch.cmd.
"""
from __future__ import annotations

import re

from moeplan.errors import InputError
from moeplan.launch.common import Command, Launch, Script, ShellVar
from moeplan.launch.render import header_lines
from moeplan.planner.model.spec import ModelSpec
from moeplan.planner.placement import Placement
from moeplan.planner.plan import Plan

_MSVCRT_SPACE = " \t\n\v"
_CMD_SPECIAL = '^&|<>()"'
_PS_QUOTES = "'\u2018\u2019\u201a\u201b"
_CMD_FORBIDDEN = "\r\n\x00\x1a"


def msvcrt_quote(arg: str, force: bool = False) -> str:
    """`arg` as one argument of a Windows command line (rule 1); bare when it can be."""
    if arg and not force and not any(c in arg for c in _MSVCRT_SPACE + '"'):
        return arg
    out = ['"']
    n_bs = 0
    for c in arg:
        if c == "\\":
            n_bs += 1
            continue
        out.append("\\" * (2 * n_bs + 1) + '"' if c == '"' else "\\" * n_bs + c)
        n_bs = 0
    out.append("\\" * (2 * n_bs) + '"')
    return "".join(out)


def cmd_token(arg: str) -> str:
    """One argument as launch.cmd text (rules 1 and 2)."""
    bad = [c for c in arg if c in _CMD_FORBIDDEN]
    if bad:
        raise InputError(f"argument {arg!r} holds a control character ({bad[0]!r}) that a batch file cannot carry",
                         "rename the file or folder (or use launch.ps1)")
    if isinstance(arg, ShellVar):
        return f'"%{arg.var_name}%"'
    needs_cmd = any(c in arg for c in _CMD_SPECIAL + "%") or not arg
    t = msvcrt_quote(arg, force=needs_cmd and '"' not in arg)
    if t.startswith('"') and t.count('"') == 2:
        return t.replace("%", "%%")
    return "".join("^" + c if c in _CMD_SPECIAL else "%%" if c == "%" else c for c in t)


def cmd_program(path: str) -> str:
    if any(c in path for c in _CMD_FORBIDDEN + '"'):
        raise InputError(f"program path {path!r} cannot be written in a batch file", "move the program")
    return f'"{path}"'.replace("%", "%%") if any(c in path for c in " \t" + _CMD_SPECIAL + "%") else path


def ps_quote(arg: str) -> str:
    """One PowerShell single-quoted literal (rule 3); a ShellVar reads $env:NAME."""
    if isinstance(arg, ShellVar):
        return f'"$env:{arg.var_name}"'
    return "'" + "".join(c * 2 if c in _PS_QUOTES else c for c in arg) + "'"


def legacy_unsafe(arg: str) -> bool:
    """True when Windows PowerShell 5.1's Legacy argument passing would not deliver `arg`."""
    return (not arg or '"' in arg or (any(c in arg for c in " \t") and arg.endswith("\\")))


def windows_bind(p: Placement) -> tuple[int, str] | None:
    """(node, start /AFFINITY mask) when the plan binds a node; the mask comes from the plan
    (search.py puts it in Placement.options), else every processor of the node (start drops the
    bits beyond the node's processors)."""
    if p.numa != "bind":
        return None
    node = p.numa_nodes[0] if p.numa_nodes else 0
    mask = p.options.win_affinity_mask or "0xFFFFFFFFFFFFFFFF"
    if not re.fullmatch(r"0x[0-9A-Fa-f]{1,16}", str(mask)):
        raise InputError(f"the plan's win_affinity_mask {mask!r} is not a hexadecimal mask", "re-plan with moeplan tune")
    return node, str(mask)


def _start_prefix(bind: tuple[int, str] | None) -> str:
    return f'start "" /B /WAIT /NODE {bind[0]} /AFFINITY {bind[1]} ' if bind else ""


def cmd_line(cmd: Command, bind: tuple[int, str] | None) -> str:
    """The command as one cmd line (for `moeplan tune`'s preview)."""
    argv = cmd.argv
    return _start_prefix(bind) + " ".join([cmd_program(argv[0])] + [cmd_token(a) for a in argv[1:]])


def _cmd_comment(line: str) -> str:
    # a rem line is still %-expanded, and a trailing ^ would swallow the next line
    return "rem " + line[2:].replace("%", "%%").rstrip("^ ")


def render_cmd(plan: Plan, model: ModelSpec, launch: Launch, script: Script) -> str:
    """launch.cmd: the server command for cmd.exe (extra arguments pass through: %*)."""
    cmd = script.command
    head = header_lines(plan, model, launch, script)
    # chcp 65001: cmd reads the following lines as UTF-8 (paths with non-ASCII names)
    out = ["@echo off", "chcp 65001 >nul", *(_cmd_comment(h) for h in head), "setlocal DisableDelayedExpansion"]
    for name, what in script.requires:
        msg = "".join(c for c in f"set {name} to {what}" if c.isalnum() or c in " .,:-_/")
        out.append(f"if not defined {name} (echo launch.cmd: {msg} 1>&2 & exit /b 2)")
    for k, v in cmd.env:
        out.append(f'set "{k}={str(v).replace("%", "%%")}"')  # numbers (GGML_OP_OFFLOAD_MIN_BATCH)
    groups = [[cmd_program(cmd.argv[0])]] + [[cmd_token(a) for a in part] for part in cmd.parts[1:]]
    lines = [" ".join(g) for g in groups if g] + ["%*"]
    out.append(_start_prefix(launch.win_bind) + " ^\n    ".join(lines))
    out.append("exit /b %ERRORLEVEL%")
    return "\r\n".join("\r\n".join(x.split("\n")) for x in out) + "\r\n"


def render_ps1(plan: Plan, model: ModelSpec, launch: Launch, script: Script) -> str:
    """launch.ps1: the server command for PowerShell (extra arguments pass through: @args)."""
    cmd = script.command
    out = list(header_lines(plan, model, launch, script))
    out += ["$ErrorActionPreference = 'Stop'"]
    if launch.win_bind:
        node, mask = launch.win_bind
        out += [f"# the plan binds NUMA node {node}: PowerShell cannot give a new process a preferred node, so",
                f"# launch.cmd runs it (start /NODE {node} /AFFINITY {mask}) with the same arguments",
                "& (Join-Path $PSScriptRoot 'launch.cmd') @args",
                "exit $LASTEXITCODE"]
        return "\r\n".join(out) + "\r\n"
    out.append("$PSNativeCommandArgumentPassing = 'Standard'  # PowerShell 7.3+: every argument passes exactly")
    if any(legacy_unsafe(a) for a in cmd.argv[1:] if not isinstance(a, ShellVar)):
        out += ["$v = $PSVersionTable.PSVersion",
                "if ($v.Major -lt 7 -or ($v.Major -eq 7 -and $v.Minor -lt 3)) {",
                "    Write-Error 'an argument of this command (empty, a double quote, or a trailing backslash) is "
                "passed wrongly by Windows PowerShell 5.1: run it with pwsh 7.3+ or use launch.cmd'",
                "    exit 2",
                "}"]
    for name, what in script.requires:
        msg = ps_quote(f"set {name} to {what}")
        out.append(f"if (-not $env:{name}) {{ Write-Error {msg}; exit 2 }}")
    for k, v in cmd.env:
        out.append(f"$env:{k} = {ps_quote(str(v))}")
    out.append(f"$exe = {ps_quote(cmd.argv[0])}")
    out.append("$argv = @(")
    out += ["    " + ", ".join(ps_quote(a) for a in part) for part in cmd.parts[1:] if part]
    out.append(")")
    out += ["& $exe @argv @args", "exit $LASTEXITCODE"]
    text = "\r\n".join(out) + "\r\n"
    # Windows PowerShell 5.1 reads a script without a byte-order mark in the ANSI code page
    return text if text.isascii() else "\ufeff" + text
