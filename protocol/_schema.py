"""Parse untrusted wire maps into frozen dataclasses: the dataclass is the schema.

Supported field types: bool, int, float, str, bytes, None, `X | None`, `Literal[...]`,
`list[X]`, `tuple[X, ...]`, `dict[str, X]`, and nested schema dataclasses. Unknown keys are
ignored (forward compatibility); a missing or mistyped field is VALIDATION_FAILED naming the
field, e.g. `argv[0]` or `env.PATH`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
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
    for name, path, convert, required in _plan(cls, where):  # type: ignore[arg-type]
        if name in raw:
            values[name] = convert(raw[name], path)
        elif required:
            raise invalid(path, "is required")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate()
    return obj


_Converter = Callable[[object, str], Any]


@functools.cache
def _plan(cls: type[Any], where: str) -> tuple[tuple[str, str, _Converter, bool], ...]:
    """(name, path, converter, required) of each field. Resolving annotations and building
    converters is slow, so it is done once per class, not once per message."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (
            f.name,
            f.name if where == "params" else f"{where}.{f.name}",
            _converter(hints[f.name]),
            f.default is _MISSING and f.default_factory is _MISSING,
        )
        for f in dataclasses.fields(cls)
    )


def _type_name(value: object) -> str:
    return "nil" if value is None else type(value).__name__


@functools.cache
def _converter(tp: Any) -> _Converter:
    """A function that checks (and converts) one wire value of type `tp`."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return lambda value, path: value
    if origin in (Union, types.UnionType):
        return _union_converter(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        allowed = {(type(c), c) for c in choices}

        def literal(value: object, path: str) -> Any:
            with contextlib.suppress(TypeError):  # an unhashable value is simply not a choice
                if (type(value), value) in allowed:
                    return value
            raise invalid(path, f"expected one of {', '.join(map(repr, choices))}, got {value!r}")

        return literal
    if origin in (list, tuple):
        item = _converter(typing.get_args(tp)[0])
        as_tuple = origin is tuple

        def sequence(value: object, path: str) -> Any:
            if not isinstance(value, (list, tuple)):
                raise invalid(path, f"expected a list, got {_type_name(value)}")
            items = [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return tuple(items) if as_tuple else items

        return sequence
    if origin is dict:
        entry = _converter(typing.get_args(tp)[1])

        def mapping(value: object, path: str) -> Any:
            if not isinstance(value, Mapping):
                raise invalid(path, f"expected a map, got {_type_name(value)}")
            out = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise invalid(path, f"keys must be strings, got {_type_name(key)}")
                out[key] = entry(item, f"{path}.{key}")
            return out

        return mapping
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        nested = tp
        return lambda value, path: parse(nested, value, where=path)
    return _scalar_converter(tp)


def _union_converter(tp: Any) -> _Converter:
    options = typing.get_args(tp)
    nullable = type(None) in options
    converters = [_converter(o) for o in options if o is not type(None)]
    names = " or ".join(_describe(o) for o in options)

    def union(value: object, path: str) -> Any:
        if value is None and nullable:
            return None
        errors = []
        for convert in converters:
            try:
                return convert(value, path)
            except SupervisorError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise invalid(path, f"expected {names}, got {_type_name(value)}")

    return union


def _scalar_converter(tp: Any) -> _Converter:
    def fail(value: object, path: str) -> Any:
        raise invalid(path, f"expected {_describe(tp)}, got {_type_name(value)}")

    if tp is type(None):
        return lambda value, path: None if value is None else fail(value, path)
    if tp is int:
        return lambda value, path: value if type(value) is int else fail(value, path)
    if tp is float:
        return lambda value, path: (
            float(value) if type(value) in (int, float) else fail(value, path)  # type: ignore[arg-type]
        )
    if tp is bytes:
        return lambda value, path: (
            bytes(value) if isinstance(value, (bytes, bytearray)) else fail(value, path)
        )
    if tp in (str, bool):
        return lambda value, path: value if type(value) is tp else fail(value, path)
    raise TypeError(f"unsupported schema type {tp!r}")  # a schema bug, not bad input


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
