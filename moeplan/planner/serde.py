"""Frozen dataclasses <-> plain JSON-able dicts, driven by type hints (pure)."""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _convert(args[0], value)
        for a in args:
            if a in (int, float, str, bool) and isinstance(value, a):
                return value
        return _convert(args[0], value)
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        if args:
            return tuple(_convert(a, v) for a, v in zip(args, value))
        return tuple(value)
    if origin is dict:
        kt, vt = get_args(tp) or (str, Any)
        return {_convert(kt, k): _convert(vt, v) for k, v in value.items()}
    if origin is list:
        (vt,) = get_args(tp) or (Any,)
        return [_convert(vt, v) for v in value]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_jsonable(tp, value)
    if tp is float and isinstance(value, int):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def from_jsonable(cls: type, data: dict) -> Any:
    """Build dataclass `cls` from a dict; unknown keys are ignored, missing keys take defaults."""
    hints = get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kwargs)
