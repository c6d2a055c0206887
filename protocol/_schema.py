"""Parse untrusted wire maps into frozen dataclasses: the dataclass is the schema.

Supported field types: bool, int, float, str, bytes, None, `X | None`, `Literal[...]`,
`list[X]`, `tuple[X, ...]`, `dict[str, X]`, and nested schema dataclasses. Unknown keys are
ignored (forward compatibility); a missing or mistyped field is VALIDATION_FAILED naming the
field, e.g. `argv[0]` or `env.PATH`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from ._errors import ErrorCode, SupervisorError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def invalid(field: str, message: str) -> SupervisorError:
    """The VALIDATION_FAILED error for one field."""
    return SupervisorError(ErrorCode.VALIDATION_FAILED, f"{field}: {message}", {"field": field})


def parse(cls: type[T], raw: object, *, where: str = "params") -> T:
    """Build `cls` from a wire value, checking every field's type.

    Range checks and other rules that types cannot say live in the class's `validate()`
    method, which is called last when it exists.
    """
    if not isinstance(raw, Mapping):
        raise invalid(where, f"expected a map, got {_type_name(raw)}")
    values: dict[str, Any] = {}
    for name, tp, required in _fields(cls):  # type: ignore[arg-type]  # classes are hashable
        path = name if where == "params" else f"{where}.{name}"
        if name in raw:
            values[name] = _convert(tp, raw[name], path)
        elif required:
            raise invalid(path, "is required")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate()
    return obj


@functools.cache
def _fields(cls: type[Any]) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each field. Resolving string annotations is slow, and it is
    done once per class, not once per message."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, hints[f.name], f.default is _MISSING and f.default_factory is _MISSING)
        for f in dataclasses.fields(cls)
    )


def _type_name(value: object) -> str:
    return "nil" if value is None else type(value).__name__


def _convert(tp: Any, value: object, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, path)
            except SupervisorError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        names = " or ".join(_describe(o) for o in options)
        raise invalid(path, f"expected {names}, got {_type_name(value)}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) in {type(c) for c in choices}:
            return value
        raise invalid(path, f"expected one of {', '.join(map(repr, choices))}, got {value!r}")
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise invalid(path, f"expected a list, got {_type_name(value)}")
        items = [_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        _, value_tp = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise invalid(path, f"expected a map, got {_type_name(value)}")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise invalid(path, f"keys must be strings, got {_type_name(key)}")
            out[key] = _convert(value_tp, item, f"{path}.{key}")
        return out
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return parse(tp, value, where=path)
    if tp is type(None):
        if value is None:
            return None
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is bytes:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
    elif tp in (str, bool):
        if type(value) is tp:
            return value
    else:  # pragma: no cover - a schema bug, not bad input
        raise TypeError(f"unsupported schema type {tp!r}")
    raise invalid(path, f"expected {_describe(tp)}, got {_type_name(value)}")


def _describe(tp: Any) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "a boolean",
        bytes: "bytes",
        type(None): "nil",
    }
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return "a list"
    if origin is dict:
        return "a map"
    return getattr(tp, "__name__", repr(tp))
