"""Parity case files: JSONL, one case per line, simple enough to write by hand.

A case::

    {"name": "chat-tool",                      # unique, used in reports and --case filters
     "path": "/v1/chat/completions",           # default /v1/chat/completions
     "method": "POST",                         # default POST (GET sends no body)
     "body": {...},                            # JSON body, sent compact in key order
     "raw": "...",                             # or: the body as a literal string (bad JSON...)
     "headers": {"content-type": null},        # request headers to set; null drops a default
     "modes": ["unary", "stream"],             # default both for a JSON body, else ["unary"]
     "stream_extra": {...},                    # keys added to the body in stream mode only
     "normalize": ["usage.prompt_tokens_details.cached_tokens"]}   # per-run fields to mask

Any string value "$MODEL" in the body is replaced by the served model name. In stream mode
the body gets `"stream": true` (at the end, after `stream_extra`). `normalize` paths are
dotted keys into each JSON document (the unary body, or every SSE event); `*` matches every
element of a list or every value of an object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shakedown._core import ShakedownError

MODEL_PLACEHOLDER = "$MODEL"
MODES = ("unary", "stream")
DEFAULT_CASES = Path(__file__).resolve().parent / "default_cases.jsonl"
_KEYS = {"name", "path", "method", "body", "raw", "headers", "modes", "stream_extra", "normalize"}


class CaseError(ShakedownError, ValueError):
    """A case file that can't be used, with the file and line it came from."""


@dataclass(frozen=True)
class Case:
    name: str
    path: str = "/v1/chat/completions"
    method: str = "POST"
    body: Any = None
    raw: str | None = None
    headers: Mapping[str, str | None] = field(default_factory=dict)
    modes: tuple[str, ...] = ("unary",)
    stream_extra: Mapping[str, Any] = field(default_factory=dict)
    normalize: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """One concrete HTTP request: a case in one mode, for one model name."""

    case: Case
    mode: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None

    @property
    def label(self) -> str:
        return f"{self.case.name} [{self.mode}]"


def _substitute(value: Any, model: str) -> Any:
    if isinstance(value, str):
        return model if value == MODEL_PLACEHOLDER else value
    if isinstance(value, list):
        return [_substitute(v, model) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, model) for k, v in value.items()}
    return value


def encode_json(value: Any) -> bytes:
    """Compact, key order kept, UTF-8 as is: what a typical client sends, byte for byte."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def requests_for(case: Case, model: str) -> Iterator[Request]:
    """The case's requests, one per mode, in the order of `case.modes`."""
    for mode in case.modes:
        headers: dict[str, str] = {}
        body: bytes | None = None
        if case.method != "GET":
            headers["content-type"] = "application/json"
            if case.raw is not None:
                body = _substitute(case.raw, model).encode()
            elif case.body is not None:
                value = _substitute(case.body, model)
                if mode == "stream":
                    value = {**value, **case.stream_extra, "stream": True}
                body = encode_json(value)
        for key, val in case.headers.items():
            if val is None:
                headers.pop(key.lower(), None)
            else:
                headers[key.lower()] = val
        yield Request(case, mode, case.method, case.path, headers, body)


def parse_case(obj: Any, where: str) -> Case:
    if not isinstance(obj, dict):
        raise CaseError(f"{where}: a case is a JSON object")
    unknown = set(obj) - _KEYS
    if unknown:
        raise CaseError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise CaseError(f"{where}: `name` must be a non-empty string")
    path = obj.get("path", "/v1/chat/completions")
    if not isinstance(path, str) or not path.startswith("/"):
        raise CaseError(f"{where}: `path` must start with /")
    method = obj.get("method", "POST")
    if method not in ("GET", "POST"):
        raise CaseError(f"{where}: `method` must be GET or POST")
    body, raw = obj.get("body"), obj.get("raw")
    if body is not None and raw is not None:
        raise CaseError(f"{where}: give `body` or `raw`, not both")
    if raw is not None and not isinstance(raw, str):
        raise CaseError(f"{where}: `raw` must be a string")
    headers = obj.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(v, str) or v is None for v in headers.values()
    ):
        raise CaseError(f"{where}: `headers` must map names to strings or null")
    default_modes = MODES if isinstance(body, dict) else ("unary",)
    modes = obj.get("modes", list(default_modes))
    if (
        not isinstance(modes, list)
        or not modes
        or any(m not in MODES for m in modes)
        or len(set(modes)) != len(modes)
    ):
        raise CaseError(f"{where}: `modes` must be a non-empty list of {list(MODES)}")
    if "stream" in modes and not isinstance(body, dict):
        raise CaseError(f"{where}: stream mode needs a JSON object `body`")
    stream_extra = obj.get("stream_extra", {})
    if not isinstance(stream_extra, dict):
        raise CaseError(f"{where}: `stream_extra` must be an object")
    normalize = obj.get("normalize", [])
    if not isinstance(normalize, list) or not all(isinstance(p, str) and p for p in normalize):
        raise CaseError(f"{where}: `normalize` must be a list of dotted paths")
    return Case(
        name=name,
        path=path,
        method=method,
        body=body,
        raw=raw,
        headers=dict(headers),
        modes=tuple(modes),
        stream_extra=dict(stream_extra),
        normalize=tuple(normalize),
    )


def parse_cases(lines: Sequence[str], source: str) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise CaseError(f"{where}: not JSON ({err})") from None
        case = parse_case(obj, where)
        if case.name in seen:
            raise CaseError(f"{where}: duplicate case name {case.name!r}")
        seen.add(case.name)
        cases.append(case)
    if not cases:
        raise CaseError(f"{source}: no cases")
    return cases


def load_cases(path: str | Path | None = None) -> list[Case]:
    """Cases from a JSONL file (blank lines and `#` comments skipped); default: the shipped set."""
    path = Path(path) if path is not None else DEFAULT_CASES
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CaseError(f"{path}: {err.strerror or err}") from None
    return parse_cases(text.splitlines(), str(path))
