"""Where output goes: people get rich tables on stdout, programs get JSON only.

Under --json nothing but one JSON document is printed on stdout; progress bars and
warnings go to stderr.
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from moeplan import __version__
from moeplan.errors import MoeplanError

if TYPE_CHECKING:
    from rich.console import Console


# rich is imported where a console is made: a --json run prints no table and never loads it
def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def emit_json(payload: dict[str, Any]) -> None:
    """Print one stable JSON document (sorted keys) stamped with moeplan's version."""
    doc = {"moeplan_version": __version__, **payload}
    sys.stdout.write(json.dumps(doc, sort_keys=True, indent=2) + "\n")
    sys.stdout.flush()


# what rich's print would rewrite in a line: markup tags ([bold]) and emoji codes (:smile:)
_RICH_REWRITES = re.compile(r"\[|:\S*:")


def _plain_for_rich(*lines: str) -> bool:
    """Whether rich would write these lines to stderr unchanged: no terminal (and none forced
    by TTY_COMPATIBLE or FORCE_COLOR, no Jupyter), printable ASCII with nothing rich
    rewrites. Such an error line is written without loading rich (0.05 s of CPU, issue 31:
    rich only where a table is printed); tests/test_console.py compares both ways."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ or "IPython" in sys.modules:
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        if isatty is None or isatty():
            return False
    except ValueError:  # a closed stream: let rich decide
        return False
    return all(line.isascii() and line.isprintable() and not _RICH_REWRITES.search(line) for line in lines)


def print_error(err: MoeplanError, as_json: bool) -> None:
    if as_json:
        emit_json({"error": err.to_dict()})
        return
    head = f"error: {err.message}"
    if _plain_for_rich(head, *([f"hint: {err.hint}"] if err.hint else [])):
        sys.stderr.write(head + "\n" + (f"hint: {err.hint}\n" if err.hint else ""))
        sys.stderr.flush()
        return
    con = stderr_console()
    # one line each, never wrapped at the terminal's width (scripts grep these)
    con.print(f"[bold red]error:[/] {err.message}", markup=True, highlight=False, soft_wrap=True)
    if err.hint:
        con.print(f"hint: {err.hint}", markup=False, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """One `warning:` line on stderr (never on stdout: --json keeps stdout for its document)."""
    stderr_console().print(f"[bold yellow]warning:[/] {text}", markup=True, highlight=False, soft_wrap=True)


class _Lines:
    """The progress bar's information as plain stderr lines: step, count, elapsed time, ETA (from
    the mean time per completed unit so far)."""

    def __init__(self, description: str, total: float | None) -> None:
        import time

        self._clock = time.monotonic
        self._t0 = self._clock()
        self.description, self.total, self.completed = description, total, 0.0

    def _line(self) -> None:
        elapsed = self._clock() - self._t0
        count = eta = ""
        if self.total:
            count = f" [{self.completed:g}/{self.total:g}]"
            if self.completed:
                eta = f", ETA {max(0.0, elapsed / self.completed * (self.total - self.completed)):.0f} s"
        print(f"{self.description}{count} {elapsed:.0f} s{eta}", file=sys.stderr, flush=True)

    def advance(self, n: float = 1) -> None:
        self.completed += n

    def update(self, **kw: Any) -> None:
        self.total = kw.get("total", self.total)
        self.completed = kw.get("completed", self.completed)
        if "description" in kw:
            self.description = kw["description"]
            self._line()

    def print(self, text: Any) -> None:
        print(text, file=sys.stderr, flush=True)


@contextmanager
def progress(description: str, total: float | None = None, enabled: bool = True,
             force: bool = False) -> Iterator[Any]:
    """A progress bar with elapsed time and ETA on stderr; plain lines (one per step) when stderr
    is no terminal (a pipe, a log, nohup); silent when disabled (under --json) unless `force`
    (--progress).

    Yields an object with `advance(n)`, `update(description=..., total=..., completed=...)`
    and `print(text)` (a line above the bar).
    """
    if force:
        enabled = True
    if not enabled:
        class _Quiet:
            def advance(self, n: float = 1) -> None:
                pass

            def update(self, **kw: Any) -> None:
                pass

            def print(self, text: Any) -> None:
                pass

        yield _Quiet()
        return
    if not sys.stderr.isatty():  # --progress into a pipe or a log: one plain line per change
        yield _Lines(description, total)
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), console=stderr_console(), transient=True) as prog:
        task = prog.add_task(description, total=total)

        class _Bar:
            def advance(self, n: float = 1) -> None:
                prog.advance(task, n)

            def update(self, **kw: Any) -> None:
                prog.update(task, **kw)

            def print(self, text: Any) -> None:
                prog.console.print(text)

        yield _Bar()
