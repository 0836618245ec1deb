"""Frozen dataclasses <-> plain JSON-able dicts, driven by type hints (pure)."""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # a field marked metadata={"omit_default": True} is left out at its default, so that
        # documents (and their digests) written before the field existed stay the same
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_default") and getattr(obj, f.name) == f.default)}
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
        args = tuple(a for a in get_args(tp) if a is not type(None))
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
        # a class that reads its own JSON form (older layouts, refused names) says so
        hook = getattr(tp, "from_json_doc", None)
        return hook(value) if hook is not None else from_jsonable(tp, value)
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


class SchemaError(ValueError):
    """A JSON document whose value at `field` does not have the type the dataclass declares."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        super().__init__(f"{field} = {shown} is not {expected}")
        self.field, self.value, self.expected = field, value, expected


def _type_name(tp: Any) -> str:
    return {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def check_types(cls: type, data: Any, path: str = "", depth: int = 0) -> None:
    """Check that `data` has the JSON types dataclass `cls` declares, before from_jsonable
    builds it: objects where dataclasses are, lists for tuples, numbers for int/float (no
    bool, no string), null only where the hint allows None. Unknown keys are ignored, as
    from_jsonable does. Raises SchemaError naming the dotted field path."""
    if not isinstance(data, dict):
        raise SchemaError(path or cls.__name__, data, "an object")
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data:
            _check_value(hints[f.name], data[f.name], f"{path}.{f.name}" if path else f.name, depth + 1)


def _check_value(tp: Any, value: Any, path: str, depth: int) -> None:
    if depth > 32:
        raise SchemaError(path, value, "nested this deep")
    if tp is Any:
        return
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return
            raise SchemaError(path, value, "allowed to be null")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                _check_value(a, value, path, depth)
                return
            except SchemaError as exc:
                errors.append(exc)
        raise errors[0]
    if value is None:
        raise SchemaError(path, value, "allowed to be null")
    if origin is tuple or origin is list:
        if not isinstance(value, list):
            raise SchemaError(path, value, "a list")
        args = get_args(tp)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise SchemaError(path, value, f"a list of {len(args)}")
            for i, (a, v) in enumerate(zip(args, value)):
                _check_value(a, v, f"{path}[{i}]", depth + 1)
            return
        item = args[0] if args else Any
        for i, v in enumerate(value):
            _check_value(item, v, f"{path}[{i}]", depth + 1)
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(path, value, "an object")
        vt = (get_args(tp) or (str, Any))[1]
        for k, v in value.items():
            _check_value(vt, v, f"{path}.{k}", depth + 1)
        return
    if tp is dict:
        if not isinstance(value, dict):
            raise SchemaError(path, value, "an object")
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        check_types(tp, value, path, depth)
        return
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(path, value, _type_name(tp))
        return
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise SchemaError(path, value, _type_name(tp))
        return
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(path, value, _type_name(tp))
        return
    if tp is str:
        if not isinstance(value, str):
            raise SchemaError(path, value, _type_name(tp))
        return
