"""Readable differences between two normalized responses."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence


def _pretty(line: str) -> list[str]:
    """A JSON body spread over lines so a diff points at fields. SSE events stay one line
    each: a diff of whole events shows which chunks differ, split or go missing."""
    if line.startswith("data: ") or not line.startswith(("{", "[")):
        return [line]
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return [line]
    return json.dumps(doc, indent=2, ensure_ascii=False).split("\n")


def unified(
    a_lines: Sequence[str], b_lines: Sequence[str], a_name: str, b_name: str, context: int = 3
) -> str:
    """A unified diff; a JSON body is expanded field by field unless only its bytes differ."""
    a_view = [p for line in a_lines for p in _pretty(line)]
    b_view = [p for line in b_lines for p in _pretty(line)]
    if a_view == b_view:
        # Same values, different bytes (escaping, number format, spacing): show the raw lines.
        a_view, b_view = list(a_lines), list(b_lines)
    return "\n".join(
        difflib.unified_diff(a_view, b_view, fromfile=a_name, tofile=b_name, n=context, lineterm="")
    )
