"""What every command shares: the --json option shape and error handling."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, Any

import typer

from moeplan.errors import Interrupted, MoeplanError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.")]

DEBUG_ENV = "MOEPLAN_DEBUG"


def command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command body; MoeplanError becomes one line + hint (or {"error": ...}) and its
    exit code. Other exceptions are bugs: one line and exit 1, a traceback with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from moeplan.ui.console import print_error  # rich loads only when a command runs

        as_json = bool(kwargs.get("as_json", False))
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except MoeplanError as err:
            print_error(err, as_json)
            raise typer.Exit(err.exit_code) from None
        except KeyboardInterrupt:
            stop = Interrupted("interrupted (Ctrl-C)", "files are written whole or not at all; rerun the command")
            print_error(stop, as_json)
            raise typer.Exit(stop.exit_code) from None
        except Exception as exc:  # a bug: say so in one line unless debugging
            if os.environ.get(DEBUG_ENV):
                raise
            print_error(MoeplanError(f"internal error: {type(exc).__name__}: {exc}",
                                     f"rerun with --debug (or {DEBUG_ENV}=1) for a traceback and report it"),
                        as_json)
            raise typer.Exit(1) from None

    return wrapper
ProgressOpt = Annotated[bool, typer.Option("--progress", help="Show the progress bar on stderr even with --json or no terminal.")]


def usage_error(exc: Exception, args: list[str], prog: str = "moeplan") -> Exception:
    """click's own usage errors (an unknown flag or command, a missing argument, a bad value)
    in the documented form: `error:` and `hint:` lines on stderr, or {"error": ...} on stdout
    under --json; exit 2 as every bad input."""
    from typer import _click

    from moeplan.errors import InputError

    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else prog
    hint = f"see `{where} --help`"
    if isinstance(exc, _click.exceptions.NoSuchOption):
        message = f"{where} has no option {exc.option_name}"
        if exc.possibilities:
            hint = "did you mean " + " or ".join(sorted(exc.possibilities)) + f"? ({hint})"
    err = InputError(message.rstrip("."), hint)
    as_json = "--json" in args

    class _Shown(_click.exceptions.ClickException):
        exit_code = err.exit_code

        def show(self, file=None) -> None:
            from moeplan.ui.console import print_error

            print_error(err, as_json)

    return _Shown(message)


def group_class() -> type:
    """The app's click group: usage errors of every command shown as usage_error says."""
    from typer import _click
    from typer.core import TyperGroup

    class MoeplanGroup(TyperGroup):
        _args: list[str] = []

        def parse_args(self, ctx, args):
            MoeplanGroup._args = list(args)
            try:
                return super().parse_args(ctx, args)
            except _click.exceptions.UsageError as exc:
                raise usage_error(exc, MoeplanGroup._args) from None

        def invoke(self, ctx):
            try:
                return super().invoke(ctx)
            except _click.exceptions.UsageError as exc:
                raise usage_error(exc, MoeplanGroup._args) from None

    return MoeplanGroup
