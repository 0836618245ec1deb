"""ui/console.print_error writes an error line without rich where rich would write it unchanged
(no terminal, printable ASCII, no markup or emoji codes): the same bytes either way."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

from moeplan.errors import InputError, MoeplanError
from moeplan.ui import console

MESSAGES = [
    ("DeepSeek-V4-Pro: no placement fits: even with every expert on the CPU it needs 30.8 GiB of VRAM "
     "(with the 1 GiB margin), the budget is 24.0 GiB", "try a smaller quant (--quant), a shorter --ctx"),
    ("unknown model 'foo'", ""),
    ("a value with trailing spaces   ", "hint with  two  spaces "),
    ("x" * 300, "a long line is not wrapped " * 10),
    # rich rewrites these: the plain path must leave them to rich
    ("a [bold]markup[/bold] tag in the message", "see [docs]"),
    ("an emoji code :thumbs_up: and a port host:8080:x", "http://a:b:c"),
    ("non-ASCII \u2265 4 GiB", "tab\there"),
    ("two\nlines", None),
]


def _printed(err: MoeplanError, plain_allowed: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, bool]:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    used_plain = console._plain_for_rich(f"error: {err.message}", *([f"hint: {err.hint}"] if err.hint else []))
    if not plain_allowed:
        monkeypatch.setattr(console, "_plain_for_rich", lambda *lines: False)
    console.print_error(err, as_json=False)
    monkeypatch.undo()
    return buf.getvalue(), used_plain


@pytest.mark.parametrize("message,hint", MESSAGES)
def test_plain_error_line_is_what_rich_writes(message: str, hint: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    err = InputError(message, hint) if hint is not None else MoeplanError(message)
    fast, used_plain = _printed(err, True, monkeypatch)
    slow, _ = _printed(err, False, monkeypatch)
    assert fast == slow
    # the first four are plain; the others contain what rich rewrites and go through rich
    assert used_plain == (MESSAGES.index((message, hint)) < 4)


def test_terminal_or_forced_colour_goes_through_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    assert not console._plain_for_rich("error: x")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert console._plain_for_rich("error: x")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not console._plain_for_rich("error: x")


def test_plain_error_does_not_load_rich() -> None:
    code = ("import sys\nfrom moeplan.errors import InputError\nfrom moeplan.ui.console import print_error\n"
            "print_error(InputError('no placement fits', 'try --ctx'), False)\n"
            "print('rich' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={k: v for k, v in __import__("os").environ.items()
                              if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")})
    assert out.stdout.strip() == "False"
    assert out.stderr == "error: no placement fits\nhint: try --ctx\n"
