"""Turn a response into the lines that are compared: only what must differ is masked.

Masked everywhere: generated ids (`chatcmpl-…`, `cmpl-…`, `call-…`, and the Responses
API's `resp_…`/`msg_…`) and `created`/`created_at` timestamps. These are rewritten in the
raw bytes, so every other byte (key order, escapes, number formatting) still counts.
A case's `normalize` paths are masked in the parsed JSON; that document is then re-encoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from .client import Response

# Headers whose values are part of the contract; framing (content-length vs chunked),
# date and server are transport details.
COMPARED_HEADERS = ("content-type", "cache-control", "allow", "www-authenticate")
MASK = "<normalized>"

_IDS = re.compile(rb'"(chatcmpl|cmpl|call)-[0-9A-Za-z][0-9A-Za-z_-]*"|"(resp|msg)_[0-9A-Za-z]{8,}"')
_TIMES = re.compile(rb'"(created|created_at)":\d+')


def _mask_ids(match: re.Match[bytes]) -> bytes:
    prefix = match.group(1) or match.group(2)
    sep = b"-" if match.group(1) else b"_"
    return b'"' + prefix + sep + b'<id>"'


def mask_generated(raw: bytes) -> bytes:
    raw = _IDS.sub(_mask_ids, raw)
    return _TIMES.sub(lambda m: b'"' + m.group(1) + b'":0', raw)


def _mask_path(doc: Any, keys: Sequence[str]) -> Any:
    if not keys:
        return MASK
    head, rest = keys[0], keys[1:]
    if isinstance(doc, dict):
        if head == "*":
            return {k: _mask_path(v, rest) for k, v in doc.items()}
        if head in doc:
            return {**doc, head: _mask_path(doc[head], rest)}
        return doc
    if isinstance(doc, list):
        if head == "*":
            return [_mask_path(v, rest) for v in doc]
        if head.isdigit() and int(head) < len(doc):
            index = int(head)
            return [*doc[:index], _mask_path(doc[index], rest), *doc[index + 1 :]]
    return doc


def mask_paths(raw: bytes, paths: Sequence[str]) -> bytes:
    """Mask each dotted path in a JSON document; non-JSON input is returned unchanged."""
    if not paths:
        return raw
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw
    for path in paths:
        doc = _mask_path(doc, path.split("."))
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def sse_events(body: bytes) -> list[bytes]:
    """The events of an SSE body, each without its blank-line terminator; a torn tail stays."""
    events = body.split(b"\n\n")
    tail = events.pop()
    if tail:
        events.append(tail + b"  <no terminating blank line>")
    return events


def normalized_lines(response: Response, paths: Sequence[str] = ()) -> list[str]:
    """Status, the compared headers, then the body: one line per SSE event, or the body."""
    lines = [f"HTTP {response.status}"]
    for name in COMPARED_HEADERS:
        if name in response.headers:
            lines.append(f"{name}: {response.headers[name]}")
    lines.append("")
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        for event in sse_events(response.body):
            event_lines = event.split(b"\n")
            out = []
            for line in event_lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    line = b"data: " + mask_paths(mask_generated(line[6:]), paths)
                else:
                    line = mask_generated(line)
                out.append(line.decode("utf-8", "backslashreplace"))
            lines.append("\\n".join(out))
    else:
        body = mask_paths(mask_generated(response.body), paths)
        lines.extend(body.decode("utf-8", "backslashreplace").split("\n"))
    return lines
