"""The check runner against the real Dynamo 1.6.1 frontend + mocker: the default suite passes
on random tokens every time, and the consistency check still fails a frontend whose stream
path breaks tool calls."""

from __future__ import annotations

from typing import Any

from check_endpoints import FaultProxy
from shakedown.checks import Settings, run_checks, run_suite
from shakedown.checks.suite import suite_from_table

from . import stack
from .conftest import Dynamo

RUNS = 20
# The trace's tool reply: reasoning, a sentence, then get_weather(city=Paris).
TOOL_REPLY = {"nvext": {"annotations": ["output_replay_id:tool:0"]}}


def settings(dynamo: Dynamo, base_url: str | None = None, **fields: Any) -> Settings:
    url = base_url or f"{dynamo.base_url}/v1"
    return Settings(base_url=url, api_key=None, model=stack.MODEL_NAME, **fields)


def test_default_suite_never_flakes_on_random_tokens(dynamo: Dynamo) -> None:
    # Unannotated requests get the mocker's random tokens: every answer differs from the last.
    # The mocker's card sets deepseek_r1, so the reasoning check runs too.
    for run in range(RUNS):
        results = run_checks(settings(dynamo, expect_reasoning=True))
        failed = [(r.name, r.reason) for r in results if r.outcome == "failed"]
        assert not failed, f"run {run + 1}: {failed}"
        assert [r.name for r in results if r.outcome == "skipped"] == ["tool-call"]


TOOL_SUITE = {
    "name": "tool calls on the replay trace",
    "extra_body": TOOL_REPLY,
    "check": [
        {"kind": "consistency", "tools": "on"},
        {"kind": "tool_calls", "cases": "builtin:weather.jsonl", "round_trip": True},
    ],
}


def test_tool_calls_pass_and_a_broken_stream_parser_fails(dynamo: Dynamo) -> None:
    suite = suite_from_table(TOOL_SUITE, "tool suite", stack.HERE)
    healthy = run_suite(suite, settings(dynamo))
    assert [(r.name, r.outcome) for r in healthy] == [
        ("consistency", "passed"),
        ("tool_calls", "passed"),
    ], [r.reason for r in healthy]
    assert "tools: finish 'tool_calls', calls ['get_weather']" in healthy[0].reason

    with FaultProxy(f"{dynamo.base_url}/v1", "leak_tool_calls") as proxy:
        broken = run_suite(suite, settings(dynamo, proxy.base_url))
    assert [r.outcome for r in broken] == ["failed", "failed"]
    assert "the stream called [], the unary answer ['get_weather']" in broken[0].reason
    assert "stream: no tool call; content 'Sure.<tool_call>" in broken[1].reason
