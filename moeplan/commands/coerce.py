"""Option values without pydantic: a fast path in front of typer's coercion.

typer >= 0.2x coerces every command-line value through a pydantic TypeAdapter built per
parameter; importing pydantic and building the adapters of a command like `tune` costs about
0.1 s of CPU, a quarter of a whole plan. Almost every moeplan option is a plain str, int or
float (or a list of str), and the value either has its type already (a default) or is a
plain decimal string. Those are coerced here, to exactly what typer's adapter returns (an
`int` for '4096', the str itself, a list for a repeated option). Any other value, annotation
or constraint, and every value that would be an error, goes to typer's own path, so the
results and the error messages stay typer's. Nothing changes when typer's internals are not
the ones this was written against (typer.core._TyperParameter.get_runtime_param).
"""
from __future__ import annotations

import re
from typing import Any

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def fast_value(annotation: Any, value: Any) -> tuple[bool, Any]:
    """(True, coerced) when `value` is one this module coerces for `annotation`, else (False, None)."""
    kind = type(value)
    if annotation is str:
        return (True, value) if kind is str else (False, None)
    if annotation is int:
        if kind is int:
            return True, value
        if kind is str and _INT.fullmatch(value):
            return True, int(value)
        return False, None
    if annotation is float:
        if kind is float:
            return True, value
        if kind is int:
            return True, float(value)
        if kind is str and _FLOAT.fullmatch(value):
            return True, float(value)
        return False, None
    if annotation == list[str] and kind in (list, tuple) and all(type(v) is str for v in value):
        return True, list(value)
    return False, None


class FastRuntimeParam:
    """typer's RuntimeParam contract (coerce(value, param, ctx)) for one parameter: None (an
    option not given) as typer's RuntimeParam.coerce returns it, the fast path above for a plain
    parameter, else the parameter's own pydantic-backed runtime, built on first need."""

    def __init__(self, param: Any, build: Any) -> None:
        self._param = param
        self._build = build
        self._plain = _plain(param.type_descriptor)
        self._slow: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        is_multi = param.multiple or param.nargs == -1
        if value is None:  # an option not given (typer's RuntimeParam.coerce, without building it)
            return () if is_multi else None
        if self._plain and not (is_multi and isinstance(value, str)):  # typer's own error for that case
            ok, out = fast_value(self._param.type_descriptor.annotation, value)
            if ok:
                return out
        if self._slow is None:
            self._slow = self._build(self._param.type_descriptor)
        return self._slow.coerce(value, param=param, ctx=ctx)


def _plain(descriptor: Any) -> bool:
    """A parameter whose coercion is its annotation alone (no parser, range, path or choice)."""
    info = descriptor.parameter_info
    return (descriptor.annotation in (str, int, float) or descriptor.annotation == list[str]) \
        and getattr(info, "parser", None) is None and getattr(info, "min", None) is None \
        and getattr(info, "max", None) is None and not descriptor.is_path and not descriptor.is_file \
        and not descriptor.is_choice


def install() -> bool:
    """Put the fast path in front of typer's parameter coercion; False when typer's internals
    differ from what this expects (typer's own coercion then runs unchanged)."""
    try:
        from typer._coercion import build_runtime_param
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - another typer
        return False
    orig = getattr(_TyperParameter, "get_runtime_param", None)
    if orig is None:  # pragma: no cover - another typer
        return False
    if getattr(orig, "_moeplan_fast", False):
        return True

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is None:
            if getattr(self, "type_descriptor", None) is not None:
                self._runtime_param = FastRuntimeParam(self, build_runtime_param)
        return orig(self)

    get_runtime_param._moeplan_fast = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    return True
