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
            err = Interrupted("interrupted (Ctrl-C)", "files are written whole or not at all; rerun the command")
            print_error(err, as_json)
            raise typer.Exit(err.exit_code) from None
        except Exception as exc:  # a bug: say so in one line unless debugging
            if os.environ.get(DEBUG_ENV):
                raise
            print_error(MoeplanError(f"internal error: {type(exc).__name__}: {exc}",
                                     f"rerun with --debug (or {DEBUG_ENV}=1) for a traceback and report it"),
                        as_json)
            raise typer.Exit(1) from None

    return wrapper
ProgressOpt = Annotated[bool, typer.Option("--progress", help="Show the progress bar on stderr even with --json or no terminal.")]
