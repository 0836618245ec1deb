"""The `moeplan` command line: a typer app whose commands live in moeplan/commands/."""
from __future__ import annotations

import os
from typing import Annotated

import typer

from moeplan import __version__
from moeplan.commands.common import DEBUG_ENV, group_class


def _quiet_flag_types() -> None:
    """typer >= 0.25 labels every on/off flag `<bool>` in --help, though a flag takes no value.
    An option that takes no value shows no type (what click and older typer print)."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - typer without its own option class
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "__module__", None) == __name__:  # None, or patched already
        return

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return shown(self, ctx)

    # a deliberate patch of typer's class (every command's options); mypy refuses assigning to a method
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_quiet_flag_types()

app = typer.Typer(
    name="moeplan",
    help="Plan, predict and verify how to run a huge Mixture-of-Experts LLM on the machine you have.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=True,
    cls=group_class(),
    # plain help: rich's help renderer (markdown-it, pygments) costs more start-up than the rest of the CLI
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moeplan {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"


def _register() -> None:
    # each module only defines its commands; the heavy imports happen inside them
    from moeplan.commands import bench, check, hardware, launch, model, plan, tuner

    for mod in (hardware, model, plan, launch, bench, tuner, check):
        mod.register(app)


_register()


def main() -> None:
    app()
