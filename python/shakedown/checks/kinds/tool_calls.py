"""``tool_calls``: the model calls the right tool with valid arguments, unary and streamed.

Cases come from a JSONL file, one row a case:

    {"name": "paris", "group": "weather",
     "messages": [{"role": "user", "content": "Weather in Paris?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}],
     "tool_choice": "auto",
     "expect": {"name": "get_weather", "arguments": {"unit": "celsius"},
                "argument_patterns": {"city": "(?i)paris"}},
     "tool_result": "{\\"temperature_c\\": 18}"}

``expect.name`` null means no call is expected. Every call's arguments must be JSON valid
against its tool's schema; ``arguments`` are required values, ``argument_patterns`` regular
expressions the values must match. A row passes when its unary and streamed answers both
pass and call the same tools. The check passes when the pass rate reaches ``threshold``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..answers import Answer, checked_calls, ok_json, stream_answer, unary_answer
from ..context import RunContext, run_bounded
from ..options import SuiteError
from ..results import CaseResult, CheckFailed, Verdict
from ..suite import CheckSpec, Suite, read_cases
from .consistency import differences

ROW_KEYS = {
    "name", "group", "messages", "tools", "tool_choice", "expect", "tool_result", "extra_body",
    "_line",
}  # fmt: skip
DEFAULT_TOOL_RESULT = '{"ok": true}'


@dataclass(frozen=True)
class Options:
    cases: str
    threshold: float = 1.0
    stream: bool = True
    # After the call, send the tool's result back and require an answer.
    round_trip: bool = False
    concurrency: int = 1
    # None: the larger of the suite's max_tokens and 256 (calls need room).
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")


@dataclass(frozen=True)
class ToolCase:
    name: str
    group: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any = "auto"
    expect_name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    patterns: dict[str, str] = field(default_factory=dict)
    tool_result: str = DEFAULT_TOOL_RESULT
    extra_body: dict[str, Any] = field(default_factory=dict)


def load_cases(suite: Suite, spec: CheckSpec, where: str) -> list[ToolCase]:
    options: Options = spec.options
    group = Path(options.cases.removeprefix("builtin:")).stem
    return [
        _case(row, f"{where}: {options.cases}:{row['_line']}", group)
        for row in read_cases(suite, options.cases, where)
    ]


def _case(row: dict[str, Any], where: str, group: str) -> ToolCase:
    unknown = sorted(set(row) - ROW_KEYS)
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {', '.join(unknown)}")
    messages, tools, expect = row.get("messages"), row.get("tools"), row.get("expect")
    if not isinstance(messages, list) or not messages:
        raise SuiteError(f"{where}: 'messages' must be a non-empty list")
    if not isinstance(tools, list) or not tools:
        raise SuiteError(f"{where}: 'tools' must be a non-empty list")
    if not isinstance(expect, dict) or "name" not in expect:
        raise SuiteError(f"{where}: 'expect' must be an object with 'name' (null: no call)")
    patterns = expect.get("argument_patterns") or {}
    for key, pattern in patterns.items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise SuiteError(f"{where}: argument_patterns.{key}: {exc}") from None
    result = row.get("tool_result", DEFAULT_TOOL_RESULT)
    return ToolCase(
        name=str(row.get("name") or f"line {row['_line']}"),
        group=str(row.get("group") or group),
        messages=messages,
        tools=tools,
        tool_choice=row.get("tool_choice", "auto"),
        expect_name=expect["name"],
        arguments=dict(expect.get("arguments") or {}),
        patterns=dict(patterns),
        tool_result=result if isinstance(result, str) else orjson.dumps(result).decode(),
        extra_body=dict(row.get("extra_body") or {}),
    )


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    cases = load_cases(ctx.suite, spec, spec.name)
    max_tokens = options.max_tokens or max(ctx.max_tokens, 256)
    outcomes: list[tuple[ToolCase, str | None, float]] = []
    allowed_failures = len(cases) - _needed(options.threshold, len(cases))

    def work(case: ToolCase) -> tuple[str | None, float]:
        start = time.monotonic()
        try:
            return judge_case(ctx, spec, options, case, max_tokens), time.monotonic() - start
        except (CheckFailed, OSError, ValueError) as exc:
            return f"{exc}", time.monotonic() - start

    def decided() -> bool:
        return sum(problem is not None for _, problem, _ in outcomes) > allowed_failures

    for case, (problem, took) in run_bounded(cases, work, options.concurrency, decided):
        outcomes.append((case, problem, took))
        ctx.update(len(outcomes), len(cases), sum(p is None for _, p, _ in outcomes))
    return verdict(outcomes, len(cases), options.threshold)


def _needed(threshold: float, total: int) -> int:
    """Rows that must pass: the smallest count whose rate reaches ``threshold``."""
    for passed in range(total + 1):
        if passed / total >= threshold - 1e-12:
            return passed
    return total


def verdict(
    outcomes: list[tuple[ToolCase, str | None, float]], total: int, threshold: float
) -> Verdict:
    passed = sum(problem is None for _, problem, _ in outcomes)
    rate = passed / total
    ok = passed >= _needed(threshold, total)
    groups: dict[str, list[tuple[str | None, float]]] = {}
    for case, problem, took in outcomes:
        groups.setdefault(case.group, []).append((problem, took))
    cases = tuple(
        CaseResult(
            group,
            "passed"
            if sum(p is None for p, _ in rows) / len(rows) >= threshold - 1e-12
            else "failed",
            sum(t for _, t in rows),
            f"{sum(p is None for p, _ in rows)}/{len(rows)} rows passed",
        )
        for group, rows in groups.items()
    )
    run_note = "" if len(outcomes) == total else f" (stopped after {len(outcomes)}: decided)"
    summary = f"{passed}/{total} rows passed ({rate:.0%}, threshold {threshold:.0%}){run_note}"
    failures = [f"{case.name}: {problem}" for case, problem, _ in outcomes if problem]
    if failures:
        summary += "; " + "; ".join(failures[:3])
        if len(failures) > 3:
            summary += f"; and {len(failures) - 3} more"
    return Verdict(ok, summary, cases, {"passed": passed, "total": total, "rate": rate})


def judge_case(
    ctx: RunContext, spec: CheckSpec, options: Options, case: ToolCase, max_tokens: int
) -> str | None:
    """None when the case passes, else what went wrong."""
    body = (
        ctx.request(
            spec,
            defaults={"max_tokens": max_tokens},
            messages=case.messages,
            tools=case.tools,
            tool_choice=case.tool_choice,
        )
        | case.extra_body
    )
    unary = unary_answer(ok_json(ctx.client.post("/chat/completions", body), "unary"), "unary")
    problem = judge_answer(unary, case, "unary")
    if problem:
        return problem
    if options.stream:
        streamed = stream_answer(
            ctx.client.stream("/chat/completions", body | {"stream": True}), "stream"
        )
        problem = judge_answer(streamed, case, "stream")
        if problem:
            return problem
        mismatch = differences(unary, streamed, case.tools, ctx.deterministic)
        if mismatch:
            return "stream vs unary: " + "; ".join(mismatch)
    if options.round_trip and unary.calls:
        return _round_trip(ctx, body, unary, case)
    return None


def judge_answer(answer: Answer, case: ToolCase, side: str) -> str | None:
    if case.expect_name is None:
        if answer.calls:
            return f"{side}: called {answer.names}, want no call"
        if answer.finish_reason == "tool_calls":
            return f"{side}: finish_reason 'tool_calls' without a call"
        return None
    if not answer.calls:
        return f"{side}: no tool call; content {answer.content[:160]!r}"
    name = answer.calls[0][0]
    if name != case.expect_name:
        return f"{side}: called {name!r}, want {case.expect_name!r}"
    if answer.finish_reason != "tool_calls":
        return f"{side}: finish_reason {answer.finish_reason!r}, want 'tool_calls'"
    try:
        arguments = checked_calls(answer, case.tools, side)[0]
    except CheckFailed as exc:
        return str(exc)
    for key, want in case.arguments.items():
        if arguments.get(key) != want:
            return f"{side}: {name} argument {key!r} is {arguments.get(key)!r}, want {want!r}"
    for key, pattern in case.patterns.items():
        value = arguments.get(key)
        if value is None or re.search(pattern, str(value)) is None:
            return f"{side}: {name} argument {key!r} is {value!r}, want /{pattern}/"
    return None


def _round_trip(ctx: RunContext, body: dict[str, Any], unary: Answer, case: ToolCase) -> str | None:
    assistant = {
        "role": "assistant",
        "content": unary.content or None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, (name, args) in zip(unary.call_ids, unary.calls)
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": call_id, "content": case.tool_result}
        for call_id in unary.call_ids
    ]
    follow_up = body | {"messages": [*body["messages"], assistant, *results]}
    answer = unary_answer(
        ok_json(ctx.client.post("/chat/completions", follow_up), "tool result"), "tool result"
    )
    if not (answer.content or answer.calls or answer.reasoning):
        return "tool result: the model gave no answer after the tool result"
    return None
