"""The JSON Schema subset tool parameters and response formats use, for judging answers.

Supported: ``type`` (a name or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (bool or schema), ``items``, ``minItems``/``maxItems``,
``minimum``/``maximum``, ``minLength``/``maxLength``, ``pattern``, ``anyOf``/``oneOf``/``allOf``.
Other keywords (``$ref``, formats) are not checked: an answer is never failed for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_problem(value: object, schema: object, path: str = "$") -> str | None:
    """What makes ``value`` not match ``schema``, or None when it matches."""
    if not isinstance(schema, dict):
        return None  # `true`, `{}` or something we do not read: anything goes
    problem = _type_problem(value, schema.get("type"), path)
    if problem:
        return problem
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} should be one of {schema['enum']}, got {value!r}"
    if "const" in schema and value != schema["const"]:
        return f"{path} should be {schema['const']!r}, got {value!r}"
    for check in (_combinators, _number, _string, _array, _object):
        problem = check(value, schema, path)
        if problem:
            return problem
    return None


def _type_problem(value: object, kind: object, path: str) -> str | None:
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    known = [k for k in kinds if k in _JSON_TYPES]
    if known and not any(_JSON_TYPES[k](value) for k in known):
        want = " or ".join(known)
        return f"{path} should be {want}, got {_json_type(value)}"
    return None


def _json_type(value: object) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _combinators(value: object, schema: dict[str, Any], path: str) -> str | None:
    for sub in schema.get("allOf") or []:
        problem = schema_problem(value, sub, path)
        if problem:
            return problem
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            problems = [schema_problem(value, sub, path) for sub in options]
            if all(problems):
                return f"{path} matches none of {key}: {problems[0]}"
    return None


def _number(value: object, schema: dict[str, Any], path: str) -> str | None:
    if not _JSON_TYPES["number"](value):
        return None
    assert isinstance(value, int | float)
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, int | float) and value < low:
        return f"{path} should be >= {low}, got {value}"
    if isinstance(high, int | float) and value > high:
        return f"{path} should be <= {high}, got {value}"
    return None


def _string(value: object, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, str):
        return None
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        return f"{path} should have at least {low} characters, got {len(value)}"
    if isinstance(high, int) and len(value) > high:
        return f"{path} should have at most {high} characters, got {len(value)}"
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        return f"{path} should match /{pattern}/, got {value!r}"
    return None


def _array(value: object, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, list):
        return None
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        return f"{path} should have at least {low} items, got {len(value)}"
    if isinstance(high, int) and len(value) > high:
        return f"{path} should have at most {high} items, got {len(value)}"
    items = schema.get("items")
    if isinstance(items, dict):
        for number, item in enumerate(value):
            problem = schema_problem(item, items, f"{path}[{number}]")
            if problem:
                return problem
    return None


def _object(value: object, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, dict):
        return None
    for name in schema.get("required") or []:
        if name not in value:
            return f"{path} is missing required {name!r}"
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = schema_problem(item, properties[name], f"{path}.{name}")
        elif extra is False:
            problem = f"{path} has unexpected property {name!r}"
        else:
            problem = schema_problem(item, extra, f"{path}.{name}")
        if problem:
            return problem
    return None
