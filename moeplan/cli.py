"""The `moeplan` command line: a typer app whose commands live in moeplan/commands/."""
from __future__ import annotations

import gc
import os
import sys
from typing import Annotated

import typer

from moeplan import __version__
from moeplan.commands import coerce
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
# plain str / int / float options are coerced without pydantic (typer loads it for every value)
coerce.install()

# which module of moeplan/commands registers each command: `moeplan tune ...` builds only its
# module's commands (typer inspects every command's signature when it starts); any other
# first argument (--help, a typo) gets them all. tests/test_planning_speed.py checks the map.
COMMAND_MODULES = {"probe": "hardware", "hardware": "hardware", "models": "model", "inspect": "model",
                   "estimate": "plan", "tune": "plan", "emit": "launch", "bench": "bench", "calibrate": "tuner",
                   "check": "check"}
MODULE_ORDER = ("hardware", "model", "plan", "launch", "bench", "tuner", "check")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moeplan {__version__}")
        raise typer.Exit()


def main_options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"


def build_app(modules: tuple[str, ...] = MODULE_ORDER) -> typer.Typer:
    """The CLI with the commands of these command modules (each module only defines its
    commands; the heavy imports happen inside them)."""
    import importlib

    new = typer.Typer(
        name="moeplan",
        help="Plan, predict and verify how to run a huge Mixture-of-Experts LLM on the machine you have.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=True,
        cls=group_class(),
        # plain help: rich's help renderer (markdown-it, pygments) costs more start-up than the rest of the CLI
        rich_markup_mode=None,
    )
    new.callback()(main_options)
    for name in modules:
        importlib.import_module(f"moeplan.commands.{name}").register(new)
    return new


def __getattr__(name: str) -> typer.Typer:
    """`moeplan.cli.app`: every command, built on first use (main() builds only what it runs)."""
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(name)


# the cyclic collector's first threshold in a CLI process (CPython's default: 700). A `tune`
# creates many objects that live until it exits (modules, classes, model records) or are freed
# by reference counting; at 700 the collector ran 81 times in `tune glm-5.1` (gc.callbacks),
# found 353 objects in cycles and cost 0.013 s of CPU. At this threshold a plain `tune` runs
# none, and a long command still collects its cycles.
GC_THRESHOLD = 100_000


def main() -> None:
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])  # the `moeplan` script (python -m moeplan sets it earlier)
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    module = COMMAND_MODULES.get(first)
    if first == "--version":  # an eager option: it prints and exits before any command is looked at
        build_app(())()
    build_app((module,) if module else MODULE_ORDER)()
