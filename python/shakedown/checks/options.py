"""Typed check options from a suite file's table, with errors that name the file and key."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from shakedown._core import ShakedownError

T = TypeVar("T")


class SuiteError(ShakedownError, ValueError):
    """A suite or case file that cannot be used; the message says where and why."""


def parse_options(cls: type[T], table: Mapping[str, Any], where: str) -> T:
    """An instance of the dataclass ``cls`` from ``table``: unknown keys and wrong types are
    errors; absent keys take the field defaults."""
    assert dataclasses.is_dataclass(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise SuiteError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    values = {
        name: coerce(table[name], hints[name], f"{where}: {name}")
        for name in fields
        if name in table
    }
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise SuiteError(f"{where}: {exc}") from None


def coerce(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against the type ``hint`` (ints widen to floats)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except SuiteError as exc:
                errors.append(str(exc))
        raise SuiteError(errors[0] if len(errors) == 1 else f"{where}: unexpected {value!r}")
    if origin is Literal:
        if value not in args:
            raise SuiteError(f"{where}: must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is list or origin is tuple:
        if not isinstance(value, list | tuple):
            raise SuiteError(f"{where}: must be a list, got {value!r}")
        item = args[0] if args else Any
        items = [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise SuiteError(f"{where}: must be a table, got {value!r}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise SuiteError(f"{where}: must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SuiteError(f"{where}: must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SuiteError(f"{where}: must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SuiteError(f"{where}: must be a string, got {value!r}")
        return value
    raise TypeError(f"{where}: option type {hint!r} is not supported")
