"""The golden parser cases in tests/fixtures/parsers/, the same files `cargo test` reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent / "fixtures" / "parsers"


@dataclass
class Case:
    label: str
    text: str
    expect: dict[str, Any]
    reasoning: str | None = None
    tool_call: str | None = None
    tools: list[dict[str, Any]] | None = None
    in_reasoning: bool | None = None
    thinking: bool | None = None
    force_nonempty_content: bool = False
    dialect: str = "dynamo"
    options: dict[str, Any] = field(default_factory=dict)


def load_cases() -> list[Case]:
    cases = []
    for kind in ("reasoning", "tools", "chat"):
        for path in sorted((ROOT / kind).glob("*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            for raw in doc["cases"]:

                def pick(key: str, raw: dict[str, Any] = raw, doc: dict[str, Any] = doc) -> Any:
                    return raw.get(key, doc.get(key))

                case = Case(
                    label=f"{path.name}: {raw.get('name', '')}",
                    text=raw["text"],
                    expect=raw["expect"],
                    reasoning=pick("reasoning"),
                    tool_call=pick("tool_call"),
                    tools=pick("tools"),
                    in_reasoning=pick("in_reasoning"),
                    thinking=pick("thinking"),
                    force_nonempty_content=bool(pick("force_nonempty_content")),
                    dialect=pick("dialect") or "dynamo",
                )
                case.options = {
                    "reasoning": case.reasoning,
                    "tool_call": case.tool_call,
                    "tools": case.tools,
                    "in_reasoning": case.in_reasoning,
                    "thinking": case.thinking,
                    "force_nonempty_content": case.force_nonempty_content,
                    "dialect": case.dialect,
                }
                cases.append(case)
    return cases


CASES = load_cases()
