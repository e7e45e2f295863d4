"""Check suites: which checks run, in what order, with what options.

A suite file is TOML (Python 3.11+, read with the standard library's ``tomllib``) or JSON
(any Python; the same keys). Nothing is vendored and nothing extra is installed: on Python
3.10 a ``.toml`` suite is refused with a message that says to use the JSON form.

    name = "tool-calling model"
    deterministic = false        # byte-equal stream/unary only when the engine guarantees it
    max_tokens = 64
    extra_body = { temperature = 0 }   # merged into every request

    [[check]]
    kind = "tool_calls"
    cases = "builtin:weather.jsonl"
    threshold = 0.9

Every check has ``kind``, an optional ``name`` (default: the kind), ``requires``
(``"reasoning_parser"`` or ``"tool_call_parser"``: skipped unless the worker has one),
``extra_body`` (merged into that check's requests) and the kind's own options.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import orjson

from .options import SuiteError, coerce

Requirement = Literal["reasoning_parser", "tool_call_parser"]
BUILTIN = "builtin:"
DEFAULT_MAX_TOKENS = 64


@dataclass(frozen=True)
class CheckSpec:
    kind: str
    name: str
    options: Any
    requires: Requirement | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    name: str
    checks: tuple[CheckSpec, ...]
    deterministic: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS
    extra_body: dict[str, Any] = field(default_factory=dict)
    # Case files named by a relative path are found here (the suite file's folder).
    base_dir: Path = field(default_factory=Path.cwd)


_SUITE_KEYS = {"name", "deterministic", "max_tokens", "extra_body", "check"}
_CHECK_KEYS = {"kind", "name", "requires", "extra_body"}


def load_suite(path: Path) -> Suite:
    """Read a TOML or JSON suite file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read the suite: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            table = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise SuiteError(f"{path}: not JSON: {exc}") from None
    else:
        table = _toml(raw, path)
    if not isinstance(table, dict):
        raise SuiteError(f"{path}: a suite is a table of keys")
    return suite_from_table(table, str(path), path.resolve().parent)


def _toml(raw: bytes, path: Path) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SuiteError(f"{path}: not TOML: {exc}") from None
    raise SuiteError(
        f"{path}: TOML suites need Python 3.11+ (tomllib); on Python 3.10 write the same "
        "keys as JSON in a .json file"
    )


def suite_from_table(table: Mapping[str, Any], where: str, base_dir: Path) -> Suite:
    from .kinds import KINDS

    unknown = sorted(set(table) - _SUITE_KEYS)
    if unknown:
        raise SuiteError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_SUITE_KEYS))}"
        )
    rows = table.get("check")
    if not isinstance(rows, list) or not rows:
        raise SuiteError(f"{where}: no checks (add [[check]] tables, or a 'check' list in JSON)")
    checks = []
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise SuiteError(f"{where}: check {number} is not a table")
        kind = row.get("kind")
        if kind not in KINDS:
            raise SuiteError(
                f"{where}: check {number}: kind {kind!r} is not one of {', '.join(KINDS)}"
            )
        name = coerce(row.get("name", kind), str, f"{where}: check {number}: name")
        here = f"{where}: check {number} ({name})"
        options = {k: v for k, v in row.items() if k not in _CHECK_KEYS}
        checks.append(
            CheckSpec(
                kind=kind,
                name=name,
                options=KINDS[kind].parse(options, here),
                requires=coerce(row.get("requires"), Requirement | None, f"{here}: requires"),
                extra_body=coerce(row.get("extra_body", {}), dict, f"{here}: extra_body"),
            )
        )
    names = [check.name for check in checks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(f"{where}: check names must be unique; repeated: {', '.join(duplicates)}")
    max_tokens = coerce(table.get("max_tokens", DEFAULT_MAX_TOKENS), int, f"{where}: max_tokens")
    if max_tokens < 1:
        raise SuiteError(f"{where}: max_tokens must be >= 1")
    suite = Suite(
        name=coerce(table.get("name", Path(where).stem), str, f"{where}: name"),
        checks=tuple(checks),
        deterministic=coerce(table.get("deterministic", False), bool, f"{where}: deterministic"),
        max_tokens=max_tokens,
        extra_body=coerce(table.get("extra_body", {}), dict, f"{where}: extra_body"),
        base_dir=base_dir,
    )
    for number, check in enumerate(suite.checks, 1):
        load_cases = KINDS[check.kind].load_cases
        if load_cases is not None:
            load_cases(suite, check, f"{where}: check {number} ({check.name})")
    return suite


# The nine checks `shakedown check` has always run, as a suite.
DEFAULT_SUITE_TABLE: dict[str, Any] = {
    "name": "default",
    "check": [
        {"kind": "conformance", "name": "models", "items": ["models"]},
        {"kind": "conformance", "name": "chat", "items": ["chat"]},
        {"kind": "consistency", "name": "chat-stream"},
        {"kind": "reasoning", "name": "reasoning", "requires": "reasoning_parser"},
        {
            "kind": "tool_calls",
            "name": "tool-call",
            "requires": "tool_call_parser",
            "cases": "builtin:weather.jsonl",
            "round_trip": True,
        },
        {"kind": "conformance", "name": "completions", "items": ["completions"]},
        {"kind": "conformance", "name": "max-tokens", "items": ["max-tokens"]},
        {"kind": "conformance", "name": "stop-sequence", "items": ["stop-sequence"]},
        {"kind": "conformance", "name": "bad-input", "items": ["bad-input"]},
    ],
}


def default_suite() -> Suite:
    return suite_from_table(DEFAULT_SUITE_TABLE, "the default suite", Path.cwd())


def read_cases(suite: Suite, name: str, where: str) -> list[dict[str, Any]]:
    """The rows of a JSONL case file (``#`` lines and blank lines are skipped)."""
    if name.startswith(BUILTIN):
        resource = resources.files("shakedown.checks") / "data" / name[len(BUILTIN) :]
        try:
            text = resource.read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError):
            shipped = sorted(
                f"{BUILTIN}{p.name}"
                for p in (resources.files("shakedown.checks") / "data").iterdir()
            )
            raise SuiteError(f"{where}: no {name}; shipped: {', '.join(shipped)}") from None
    else:
        path = suite.base_dir / name
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SuiteError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{where}: {name}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise SuiteError(f"{where}: {name}:{number}: a row is a JSON object")
        row.setdefault("_line", number)
        rows.append(row)
    if not rows:
        raise SuiteError(f"{where}: {name} has no rows")
    return rows
