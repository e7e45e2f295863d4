"""Each check kind against the real loopback endpoint (tiny model, shakedown's mocker answering
by script or by prompt): made to pass, and made to fail for the reason it exists to catch."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from check_endpoints import (
    FaultProxy,
    answering,
    last_user_turn,
    loopback,
    scripted,
    settings,
    thinking_model,
)
from shakedown.checks import CheckResult, run_suite
from shakedown.checks.kinds.load import LatencyOptions, Timing, judge_latency
from shakedown.checks.report import LineProgress
from shakedown.checks.suite import suite_from_table


def run(
    url: str, checks: list[dict[str, Any]], base: Path | None = None, **fields: Any
) -> list[CheckResult]:
    suite = suite_from_table({"name": "test", "check": checks}, "test suite", base or Path.cwd())
    return run_suite(suite, settings(url, **fields))


def one(url: str, check: dict[str, Any], base: Path | None = None, **fields: Any) -> CheckResult:
    [result] = run(url, [check], base, **fields)
    return result


@pytest.fixture(scope="module")
def tiny_url() -> Any:
    with loopback() as endpoint:
        yield endpoint.base_url


# --- conformance ---------------------------------------------------------------------------


def test_conformance_all_items_pass_on_the_loopback(tiny_url: str) -> None:
    result = one(tiny_url, {"kind": "conformance"})
    assert result.outcome == "passed", result.reason
    assert [c.name for c in result.cases] == [
        "models", "chat", "stream", "stream-usage", "completions", "max-tokens",
        "stop-sequence", "bad-input",
    ]  # fmt: skip
    assert result.reason == "8 of 8 items passed"


def test_conformance_n_fails_where_n_is_ignored(tiny_url: str) -> None:
    # Dynamo 1.6.1 (and so the loopback) answers one choice whatever n says.
    result = one(tiny_url, {"kind": "conformance", "items": ["n"]})
    assert result.outcome == "failed"
    assert result.reason == "n=2: choices have indexes [0], want [0, 1]"


def test_conformance_openai_error_shape_is_opt_in(tiny_url: str) -> None:
    relaxed = one(tiny_url, {"kind": "conformance", "items": ["bad-input"]})
    strict = one(tiny_url, {"kind": "conformance", "items": ["bad-input"], "openai_errors": True})
    assert relaxed.outcome == "passed"
    assert strict.outcome == "failed"
    assert "empty messages: the error body is not {'error': {'message': ...}}" in strict.reason


def test_conformance_stream_usage_missing(tiny_url: str) -> None:
    with FaultProxy(tiny_url, "drop_usage") as proxy:
        result = one(proxy.base_url, {"kind": "conformance", "items": ["stream-usage", "stream"]})
    assert result.outcome == "failed"
    assert [c.outcome for c in result.cases] == ["failed", "passed"]
    assert "include_usage is set but the last chunk has no usage" in result.reason


# --- consistency ---------------------------------------------------------------------------


def test_consistency_byte_equal_on_a_deterministic_engine(tiny_url: str) -> None:
    result = one(tiny_url, {"kind": "consistency", "tools": "on", "deterministic": True})
    assert result.outcome == "passed", result.reason
    assert result.reason.startswith("stream and unary byte-equal")
    assert [c.name for c in result.cases] == ["chat", "tools"]


def test_consistency_catches_a_broken_stream_tool_parser(tiny_url: str) -> None:
    with FaultProxy(tiny_url, "leak_tool_calls") as proxy:
        result = one(proxy.base_url, {"kind": "consistency", "tools": "on"})
    assert result.outcome == "failed"
    assert [c.outcome for c in result.cases] == ["passed", "failed"]
    assert "finish_reason 'stop' streamed, 'tool_calls' unary" in result.reason
    assert "the stream called [], the unary answer ['get_weather']" in result.reason


# --- tool_calls ----------------------------------------------------------------------------


def picks_tools(prompt: str, request: dict[str, Any]) -> str:
    """A model that reads the question: weather and time questions call the right tool."""
    user = last_user_turn(prompt).lower()
    offered = "<tools>" in prompt
    if offered and ("weather" in user or "warm" in user):
        city = "Paris" if "paris" in user else "Oslo"
        args = {"city": city} | ({"unit": "celsius"} if "celsius" in user else {})
        call = json.dumps({"name": "get_weather", "arguments": args})
        return f"<think>weather</think><tool_call>{call}</tool_call><EOS>"
    if offered and "time" in user:
        call = json.dumps({"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}})
        return f"<think>time</think><tool_call>{call}</tool_call><EOS>"
    return "<think>chat</think>Bonjour !<EOS>"


def always_weather(prompt: str, request: dict[str, Any]) -> str:
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    return f"<think>weather</think><tool_call>{call}</tool_call><EOS>"


def test_tool_calls_pass_when_the_model_picks_well() -> None:
    with loopback(answering(picks_tools)) as endpoint:
        result = one(
            endpoint.base_url,
            {"kind": "tool_calls", "cases": "builtin:tools_basic.jsonl", "round_trip": True},
        )
    assert result.outcome == "passed", result.reason
    assert result.reason == "5/5 rows passed (100%, threshold 100%)"
    assert [(c.name, c.outcome, c.reason) for c in result.cases] == [
        ("pick-the-tool", "passed", "3/3 rows passed"),
        ("restraint", "passed", "2/2 rows passed"),
    ]


def test_tool_calls_fail_below_the_threshold_and_stop_when_decided() -> None:
    with loopback(answering(always_weather)) as endpoint:
        result = one(
            endpoint.base_url,
            {"kind": "tool_calls", "cases": "builtin:tools_basic.jsonl", "threshold": 0.8},
        )
    assert result.outcome == "failed"
    # 0.8 of 5 allows one miss: the second (row 3) decides, rows 4 and 5 are never sent.
    assert result.reason.startswith(
        "1/5 rows passed (20%, threshold 80%) (stopped after 3: decided)"
    )
    assert (
        "weather-celsius: unary: get_weather argument 'unit' is None, want 'celsius'"
        in result.reason
    )
    assert "time-tokyo: unary: called 'get_weather', want 'get_time'" in result.reason
    assert result.metrics == {"passed": 1, "total": 5, "rate": 0.2}


def test_tool_calls_case_file_relative_to_the_suite(tmp_path: Path) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
    rows = [
        {"name": "london", "group": "cities", "messages": [{"role": "user", "content": "Weather in London?"}],
         "tools": [tool], "expect": {"name": "get_weather", "argument_patterns": {"city": "London"}}},
    ]  # fmt: skip
    (tmp_path / "cases.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with loopback(answering(picks_tools)) as endpoint:
        result = one(endpoint.base_url, {"kind": "tool_calls", "cases": "cases.jsonl"}, tmp_path)
    assert result.outcome == "failed"
    assert "london: unary: get_weather argument 'city' is 'Oslo', want /London/" in result.reason
    assert [c.name for c in result.cases] == ["cities"]


# --- reasoning -----------------------------------------------------------------------------

THINKING_CHECK = {
    "kind": "reasoning",
    "disabled_body": {"chat_template_kwargs": {"enable_thinking": False}},
}


def thinks_unless_told(prompt: str, request: dict[str, Any]) -> str:
    if prompt.endswith("<think></think>"):
        return "The sea is wide.<EOS>"
    return "<think>The user asks about the sea.</think>The sea is wide.<EOS>"


def test_reasoning_on_and_off(tmp_path: Path) -> None:
    model = thinking_model(tmp_path)
    with loopback(
        answering(thinks_unless_told), model_dir=model, reasoning_parser="qwen3"
    ) as endpoint:
        result = one(endpoint.base_url, THINKING_CHECK)
    assert result.outcome == "passed", result.reason
    assert [c.name for c in result.cases] == [
        "enabled/unary", "enabled/stream", "disabled/unary", "disabled/stream",
    ]  # fmt: skip


def test_reasoning_that_cannot_be_turned_off_fails(tmp_path: Path) -> None:
    model = thinking_model(tmp_path)
    with loopback(scripted({"tool": ["<think>Always.</think>Hi.<EOS>"]}), model_dir=model,
                  reasoning_parser="qwen3") as endpoint:  # fmt: skip
        result = one(endpoint.base_url, THINKING_CHECK)
    assert result.outcome == "failed"
    assert (
        "disabled/unary: thinking is off but reasoning_content came back: 'Always.'"
        in result.reason
    )


def test_reasoning_flag_the_template_ignores_fails() -> None:
    # The packaged template has no enable_thinking: the flag changes nothing, the model thinks.
    with loopback(answering(thinks_unless_told), reasoning_parser="qwen3") as endpoint:
        result = one(endpoint.base_url, THINKING_CHECK)
    assert result.outcome == "failed"
    assert "disabled/stream: thinking is off but reasoning_content came back" in result.reason


# --- structured_output ---------------------------------------------------------------------


def example_of(schema: dict[str, Any]) -> Any:
    """A value matching ``schema``: what guided decoding makes the model produce."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {name: example_of(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "integer":
        return max(0, schema.get("minimum", 0)) + 2_100_000
    if kind == "array":
        return [example_of(schema.get("items") or {})]
    return "Paris"


def guided(prompt: str, request: dict[str, Any]) -> str:
    schema = ((request.get("sampling_options") or {}).get("guided_decoding") or {}).get("json")
    if schema is None:
        return "Paris is the capital of France.<EOS>"
    return "<think>json</think>" + json.dumps(example_of(schema)) + "<EOS>"


def half_guided(prompt: str, request: dict[str, Any]) -> str:
    return '<think>json</think>{"name": "Paris", "country": "France"}<EOS>'


@pytest.mark.parametrize(
    ("reply", "outcomes", "words"),
    [
        (guided, ["passed"] * 4, "json_object/unary: a JSON object with 0 keys"),
        (
            half_guided,
            ["passed", "passed", "failed", "failed"],
            "$ is missing required 'population'",
        ),
        (None, ["failed"] * 4, "json_object/unary: the content is not JSON: 'Let me check"),
    ],
)
def test_structured_output(reply: Any, outcomes: list[str], words: str) -> None:
    engine = answering(reply) if reply else scripted()
    with loopback(engine) as endpoint:
        result = one(endpoint.base_url, {"kind": "structured_output", "stream": True})
    assert [c.outcome for c in result.cases] == outcomes, result.reason
    assert result.outcome == ("passed" if set(outcomes) == {"passed"} else "failed")
    assert words in result.reason


# --- accuracy ------------------------------------------------------------------------------

QUESTION = re.compile(r"Question (\d+): what is (\d+) \+ (\d+)\?")


def arithmetic(tmp: Path, rows: int = 40) -> Path:
    path = tmp / "sums.jsonl"
    lines = [
        json.dumps({"prompt": f"Question {i}: what is {i * 7} + {i * 3}? Answer with the number.",
                    "answer": i * 10, "group": "even" if i % 2 == 0 else "odd"})
        for i in range(1, rows + 1)
    ]  # fmt: skip
    path.write_text("# sums\n" + "\n".join(lines) + "\n")
    return path


def adds_up(wrong_every: int) -> Any:
    """Right except on every ``wrong_every``-th question: a known pass rate."""

    def reply(prompt: str, request: dict[str, Any]) -> str:
        match = QUESTION.search(last_user_turn(prompt))
        assert match, prompt
        number, a, b = map(int, match.groups())
        total = a + b + (1 if wrong_every and number % wrong_every == 0 else 0)
        return f"<think>adding</think>The answer is {total}.<EOS>"

    return reply


@pytest.mark.parametrize(
    ("wrong_every", "min_rate", "passed", "done"),
    [
        # 80% right (32/40). The verdict: Wilson lower bound over 40 rows >= min_rate.
        # 30 passes out of 40 already give a bound of 0.624 >= 0.6: decided at row 37.
        (5, 0.6, True, 37),
        # 39/40 would bound at 0.895 < 0.9: the first miss (row 5) decides.
        (5, 0.9, False, 5),
        # Every answer right: 40/40 bounds at 0.937, enough for 0.9 but only after all 40.
        (0, 0.9, True, 40),
        # Even 40/40 bounds at 0.937 < 0.95: decided before a single request.
        (0, 0.95, False, 0),
    ],
)
def test_accuracy_known_pass_rates(
    tmp_path: Path, wrong_every: int, min_rate: float, passed: bool, done: int
) -> None:
    arithmetic(tmp_path)
    check = {"kind": "accuracy", "dataset": "sums.jsonl", "matcher": "number",
             "min_pass_rate": min_rate, "concurrency": 1}  # fmt: skip
    with loopback(answering(adds_up(wrong_every))) as endpoint:
        result = one(endpoint.base_url, check, tmp_path)
    assert (result.outcome == "passed") is passed, result.reason
    assert result.metrics["done"] == done, result.reason
    if 0 < done < 40:
        assert f"stopped after {done} of 40: decided" in result.reason
    if done == 0:
        assert result.reason.startswith("cannot pass: even 40/40 right bounds the rate at 0.94")


def test_accuracy_runs_every_row_without_early_stop(tmp_path: Path) -> None:
    arithmetic(tmp_path)
    check = {"kind": "accuracy", "dataset": "sums.jsonl", "matcher": "number",
             "min_pass_rate": 0.6, "early_stop": False}  # fmt: skip
    with loopback(answering(adds_up(5))) as endpoint:
        result = one(endpoint.base_url, check, tmp_path)
    assert result.outcome == "passed"
    assert (result.metrics["passed"], result.metrics["done"]) == (32, 40)
    assert result.reason.startswith(
        "32/40 right (80%); Wilson lower bound over the dataset >= 0.60"
    )
    assert [(c.name, c.reason) for c in result.cases] == [
        ("odd", "16/20 right"),
        ("even", "16/20 right"),
    ]


def test_accuracy_against_a_pinned_reference(tmp_path: Path) -> None:
    arithmetic(tmp_path)
    with loopback(answering(adds_up(0)), served="reference") as reference:
        check = {"kind": "accuracy", "dataset": "sums.jsonl", "matcher": "number",
                 "reference": {"base_url": reference.base_url, "max_drop": 0.1}}  # fmt: skip
        with loopback(answering(adds_up(5))) as worse, loopback(answering(adds_up(0))) as same:
            failed = one(worse.base_url, check, tmp_path)
            held = one(same.base_url, check, tmp_path)
    assert failed.outcome == "failed" and failed.metrics["reference_rate"] == 1.0
    assert "Wilson lower bound over the dataset < 0.90 (reference 100% - 10%)" in failed.reason
    assert held.outcome == "passed", held.reason


@pytest.mark.parametrize(
    ("matcher", "answer", "text", "right"),
    [
        ("exact", "Paris", "  paris. ", True),
        ("exact", "Paris", "It is Paris.", False),
        ("regex", r"\bparis\b", "It is Paris.", True),
        ("number", 1234.5, "roughly 1,234.5 people", True),
        ("number", 12, "12 or maybe 13", False),
        ("choice", "B", "Between A and B, the answer is B.", True),
        ("choice", "B", "B? No: the answer is C", False),
    ],
)
def test_accuracy_matchers(
    tmp_path: Path, matcher: str, answer: Any, text: str, right: bool
) -> None:
    from shakedown.checks.kinds.accuracy import Options, _row, matches

    row = _row({"prompt": "q", "answer": answer, "matcher": matcher, "_line": 1}, "t",
               Options(dataset="x", min_pass_rate=0.5), "g")  # fmt: skip
    assert matches(row, text, case_sensitive=False) is right


# --- warmup and latency ----------------------------------------------------------------------


def test_warmup_runs_first_and_counts_only_errors() -> None:
    engine = answering(lambda prompt, request: "<think>ok</think>Fine.<EOS>")
    with loopback(engine) as endpoint:
        results = run(
            endpoint.base_url,
            [
                {"kind": "conformance", "items": ["chat"]},
                {"kind": "warmup", "requests": 6, "concurrency": 3, "prompt_tokens": [8, 128]},
            ],
        )
    assert [r.name for r in results] == ["warmup", "conformance"]
    assert results[0].outcome == "passed"
    assert results[0].reason.startswith("6 requests at concurrency 3")
    assert results[0].reason.endswith(", 0 errors")
    prompts = engine.engines[0].prompts
    assert all("Summarise" in p for p in prompts[:6]) and "Summarise" not in prompts[6]


def test_warmup_fails_on_errors() -> None:
    def breaks_on_long_prompts(prompt: str, request: dict[str, Any]) -> str:
        if len(request["token_ids"]) > 100:
            raise RuntimeError("out of memory")
        return "<think>ok</think>Fine.<EOS>"

    with loopback(answering(breaks_on_long_prompts)) as endpoint:
        result = one(
            endpoint.base_url, {"kind": "warmup", "requests": 4, "prompt_tokens": [8, 256]}
        )
    assert result.outcome == "failed"
    assert ": 2 failed:" in result.reason and result.metrics["errors"] == 2


SLOW = scripted(token_delay=0.01)  # at least 10 ms between tokens


def test_latency_within_and_beyond_slos() -> None:
    base = {"kind": "latency", "requests": 4, "concurrency": 2, "max_tokens": 8}
    with loopback(SLOW) as endpoint:
        within = one(endpoint.base_url, base | {"ttft_p99_ms": 10_000, "itl_p99_ms": 10_000,
                                                "min_rps": 0.01})  # fmt: skip
        beyond = one(
            endpoint.base_url, base | {"itl_p50_ms": 1, "slo_itl_ms": 1, "min_goodput": 0.5}
        )
    assert within.outcome == "passed", within.reason
    assert within.reason.startswith("TTFT p50/p99 ")
    assert within.metrics["itl_p50_ms"] >= 10
    assert len(within.metrics["samples"]["ttft_ms"]) == 4
    assert beyond.outcome == "failed"
    assert re.match(r"ITL p50 \d+\.\d ms > 1 ms; goodput 0% < 50% \(TTFT", beyond.reason), (
        beyond.reason
    )


def test_latency_judged_from_known_timings() -> None:
    options = LatencyOptions(requests=4, ttft_p50_ms=150, itl_p99_ms=40, slo_ttft_ms=250,
                             slo_itl_ms=35, min_goodput=0.5)  # fmt: skip
    timings = [
        Timing(0.1, [0.02, 0.03]),
        Timing(0.2, [0.02, 0.02]),
        Timing(0.3, [0.02, 0.05]),  # TTFT over its SLO: not good
        Timing(0.1, [0.05, 0.05]),  # mean ITL 50 ms over its SLO: not good
    ]
    verdict = judge_latency(options, timings, [], wall_s=2.0)
    assert verdict.metrics["ttft_p50_ms"] == 100.0 and verdict.metrics["itl_p99_ms"] == 50.0
    assert verdict.metrics["goodput"] == 0.5 and verdict.metrics["rps"] == 2.0
    assert not verdict.passed and verdict.reason.startswith("ITL p99 50.0 ms > 40 ms (")
    assert (
        judge_latency(options, timings[:2], ["boom"], 1.0).reason == "1 of 4 requests failed: boom"
    )


# --- progress --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_progress_line_on_a_terminal() -> None:
    out = Terminal()
    with loopback(answering(picks_tools)) as endpoint:
        suite = suite_from_table(
            {"check": [{"kind": "tool_calls", "cases": "builtin:tools_basic.jsonl"}]},
            "t",
            Path.cwd(),
        )
        run_suite(suite, settings(endpoint.base_url), LineProgress(out, live=True))
    text = out.getvalue()
    assert "\r\x1b[K[1/1] tool_calls     3/5 in " in text
    assert "3/3 passed (100%)" in text
    assert text.endswith("\r\x1b[K[1/1] tool_calls     ok   " + text.rsplit("ok   ", 1)[1])
