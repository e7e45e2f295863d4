"""The golden parser cases in tests/fixtures/parsers/, the same files `cargo test` reads."""

from __future__ import annotations

import functools
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
    response_template: dict[str, Any] | None = None
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
                    response_template=pick("response_template"),
                )
                case.options = {
                    "reasoning": case.reasoning,
                    "tool_call": case.tool_call,
                    "tools": case.tools,
                    "in_reasoning": case.in_reasoning,
                    "thinking": case.thinking,
                    "force_nonempty_content": case.force_nonempty_content,
                    "dialect": case.dialect,
                    "response_template": case.response_template,
                }
                cases.append(case)
    return cases


CASES = load_cases()


def tools_of(family: str) -> list[dict[str, Any]]:
    """The tools a tool-call family's golden file declares."""
    doc = json.loads((ROOT / "tools" / f"{family}.json").read_text(encoding="utf-8"))
    tools: list[dict[str, Any]] = doc["tools"]
    return tools


# Malformed outputs and the real Dynamo 1.6.1 frontend's answers to them, recorded by
# tests/fixtures/parsers/malformed.py; `shakedown` is set where shakedown's parser differs.
@functools.cache
def policy() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ROOT / "malformed.json").read_text(encoding="utf-8"))
    return doc


def outcome(case: dict[str, Any], answer: dict[str, Any]) -> str:
    """A few words for what became of a malformed call."""
    text, content, calls = case["text"], answer["content"], answer["tool_calls"]
    after = policy()["after"]
    markup = text[len(policy()["before"]) :].removesuffix(after).strip()
    words = []
    if calls:
        try:
            args = json.loads(calls[0]["arguments"])
        except ValueError:
            words.append("call, invalid JSON args")
        else:
            if not isinstance(args, dict):
                words.append("call, non-object args")
            elif not args and "()" not in markup and "{}" not in markup:
                words.append("call, args `{}`")
            else:
                words.append("call")
    if markup and markup in content:
        words.append("raw text")
    elif not calls:
        words.append("dropped")
    if text.endswith(after) and after.strip() not in content:
        words.append("rest lost")
    return ", ".join(words)


def policy_table() -> str:
    """The malformed-output table of docs/parsers.md, rendered from `policy()`."""
    kinds = list(policy()["kinds"])
    cells: dict[tuple[str, str], str] = {}
    for case in policy()["cases"]:
        ours = case.get("shakedown")
        if case["dynamo"] is None:
            cell = f"ours: {outcome(case, ours)}"
        elif ours is None:
            cell = f"{outcome(case, case['dynamo'])} ✓"
        elif outcome(case, ours) == outcome(case, case["dynamo"]):
            cell = f"{outcome(case, case['dynamo'])} ≈"
        else:
            cell = f"{outcome(case, case['dynamo'])} ✗ ours: {outcome(case, ours)}"
        cells[case["tool_call"], case["kind"]] = cell
    marks = [cell.split(" ours:")[0][-1] if " ✗" not in cell else "✗" for cell in cells.values()]
    counted = {m: marks.count(m) for m in "✓≈✗"}
    unmeasured = sum(c["dynamo"] is None for c in policy()["cases"])
    families = list(dict.fromkeys(c["tool_call"] for c in policy()["cases"]))
    lines = [
        "| family | " + " | ".join(k.replace("_", " ") for k in kinds) + " |",
        "| --- |" + " --- |" * len(kinds),
    ]
    for family in families:
        row = [cells.get((family, k), "—") for k in kinds]
        lines.append(f"| {family} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append(
        f"{len(cells)} cells: {counted['✓']} ✓, {counted['≈']} ≈, {counted['✗']} ✗, "
        f"{unmeasured} not measured."
    )
    return "\n".join(lines)
