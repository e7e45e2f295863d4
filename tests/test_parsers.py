"""Parsers through the Python API: the shared golden cases, batch and streamed,
under every chunking (property-tested), plus the API's contract."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shakedown
from parser_cases import CASES, Case, policy, policy_table, tools_of
from shakedown.parsers import (
    ChatParser,
    InvalidToolsError,
    ReasoningParser,
    ToolCallParser,
    parse,
    reasoning_parsers,
    tool_call_parsers,
)


def assembled(case: Case, pieces: list[str], *, stream_arguments: bool) -> dict[str, Any]:
    return streamed(case.options, pieces, stream_arguments=stream_arguments)


def streamed(
    options: dict[str, Any], pieces: list[str], *, stream_arguments: bool
) -> dict[str, Any]:
    parser = ChatParser(stream_arguments=stream_arguments, **options)
    content, reasoning = [], []
    calls: dict[int, dict[str, Any]] = {}
    for delta in [*(parser.feed(p) for p in pieces), parser.finish()]:
        content.append(delta.content or "")
        reasoning.append(delta.reasoning_content or "")
        for call in delta.calls:
            if call.index not in calls:
                assert call.name is not None and call.id is not None, "first delta names the call"
                calls[call.index] = {"id": call.id, "name": call.name, "arguments": ""}
            else:
                assert call.name is None and call.id is None, "only the first delta names the call"
            calls[call.index]["arguments"] += call.arguments
    return {
        "content": "".join(content),
        "reasoning_content": "".join(reasoning),
        "tool_calls": [calls[i] for i in sorted(calls)],
        "errors": len(parser.errors),
    }


ID_PREFIX = {"dynamo": "call-", "vllm": "chatcmpl-tool-", "sglang": "call_"}


def check(got: dict[str, Any], expect: dict[str, Any], label: str, dialect: str = "dynamo") -> None:
    assert got["content"] == (expect.get("content") or ""), label
    assert got["reasoning_content"] == (expect.get("reasoning_content") or ""), label
    want_calls = expect.get("tool_calls") or []
    assert [c["name"] for c in got["tool_calls"]] == [c["name"] for c in want_calls], label
    assert [c["arguments"] for c in got["tool_calls"]] == [c["arguments"] for c in want_calls]
    for got_call, want in zip(got["tool_calls"], want_calls):
        if "id" in want:
            assert got_call["id"] == want["id"], label
        else:
            assert got_call["id"].startswith(ID_PREFIX[dialect]), label
    if "errors" in expect:
        assert got["errors"] == expect["errors"], label


def message_dict(case: Case) -> dict[str, Any]:
    return parsed(case.text, case.options)


def parsed(text: str, options: dict[str, Any]) -> dict[str, Any]:
    message = parse(text, **options)
    return {
        "content": message.content or "",
        "reasoning_content": message.reasoning_content or "",
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ],
        "errors": len(message.errors),
    }


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_golden_batch(case: Case) -> None:
    check(message_dict(case), case.expect, case.label, case.dialect)


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_golden_streamed_by_character(case: Case) -> None:
    check(
        assembled(case, list(case.text), stream_arguments=False),
        case.expect,
        case.label,
        case.dialect,
    )
    if not case.expect.get("errors"):
        check(
            assembled(case, list(case.text), stream_arguments=True),
            case.expect,
            case.label,
            case.dialect,
        )


@st.composite
def chunked_case(draw: st.DrawFn) -> tuple[Case, list[str]]:
    case = draw(st.sampled_from(CASES))
    cuts = sorted(draw(st.sets(st.integers(0, len(case.text)), max_size=12)))
    bounds = [0, *cuts, len(case.text)]
    return case, [case.text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunked_case(), st.booleans())
def test_streaming_equals_batch_for_any_chunking(
    drawn: tuple[Case, list[str]], stream_arguments: bool
) -> None:
    case, pieces = drawn
    batch = message_dict(case)
    if stream_arguments and batch["errors"]:
        return  # streamed arguments can't take back a call that later turns out malformed
    got = assembled(case, pieces, stream_arguments=stream_arguments)
    assert got["content"] == batch["content"]
    assert got["reasoning_content"] == batch["reasoning_content"]
    assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == [
        (c["name"], c["arguments"]) for c in batch["tool_calls"]
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(reasoning_parsers())),
    st.sampled_from(sorted(tool_call_parsers())),
    st.lists(
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(
                [
                    "<think>",
                    "</think>",
                    "<tool_call>",
                    "</tool_call>",
                    "{",
                    "}",
                    '"',
                    "<",
                    "[",
                    "<|",
                    "|>",
                    "◁think▷",
                    "[TOOL_CALLS]",
                    "<｜tool▁calls▁begin｜>",
                    "\\",
                ]
            ),
        ),
        max_size=30,
    ),
)
def test_feed_never_raises_on_model_text(reasoning: str, tool_call: str, pieces: list[str]) -> None:
    parser = ChatParser(reasoning=reasoning, tool_call=tool_call, tools=[])
    for piece in pieces:
        parser.feed(piece)
    parser.finish()
    for error in parser.errors:
        assert isinstance(error["message"], str)


# Malformed output made from the golden cases: markup spliced, cut short, doubled or
# stray, long bodies past every name and hold bound, broken JSON, unicode.
MARKUP = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_calls>", "</tool_calls>",
    "<TOOLCALL>", "</TOOLCALL>", "[TOOL_CALLS]", "[ARGS]", "[/TOOL_CALLS]", "[THINK]",
    "[/THINK]", "◁think▷", "◁/think▷", "<|python_tag|>", "<|python_start|>", "<|python_end|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
    "<|start|>assistant", "<|channel|>commentary to=functions.f", "<|channel|>analysis",
    "<|message|>", "<|call|>", "<|end|>", "<function=f>", "<parameter=a>", "</parameter>",
    "</parameter1>", "</function>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "<minimax:tool_call>", '<invoke name="f">', '<parameter name="a">', "</invoke>",
    "<｜DSML｜function_calls>", '<｜DSML｜invoke name="f">', "</｜DSML｜invoke>", "<|tool_call>",
    "<tool_call|>", '<|"|>', "<mm:think>", "<|open|>think<|sep|>", "<|channel>thought\n",
    "<channel|>", '{"name": "f", "arguments": ', "{", "}", "[", "]", '"', "\\", '\\"', "NaN",
    "f(1, 'x')", "é", "世界", "👋",
]  # fmt: skip
LONG_BODIES = [
    "y" * 1500,
    "é世" * 900,
    '{"a": "' + 'x\\"{' * 1200 + '"}',
    '{["' * 1500,
]
PAIRS = [
    (r, t)
    for r in [None, *sorted(reasoning_parsers())]
    for t in [None, *sorted(tool_call_parsers())]
]


def malformed_output(
    rng: random.Random, reasoning: str | None, tool_call: str | None
) -> tuple[dict[str, Any], str]:
    """Golden texts of the pair's families joined, then edited at random."""
    own = [c for c in CASES if c.reasoning == reasoning or c.tool_call == tool_call] or CASES
    text = "".join(rng.choice(own).text for _ in range(rng.randint(1, 3)))
    for _ in range(rng.randint(0, 6)):
        at = rng.randint(0, len(text))
        kind = rng.randrange(6)
        if kind == 0:
            text = text[:at] + text[at + rng.randint(0, 200) :]
        elif kind == 1:
            start = rng.randint(0, len(text))
            text = text[:at] + text[start : start + rng.randint(0, 200)] + text[at:]
        elif kind == 2:
            text = text[:at] + rng.choice(MARKUP) + text[at:]
        elif kind == 3:
            marker = rng.choice(MARKUP)
            text = text[:at] + marker[: rng.randint(0, len(marker))] + text[at:]
        elif kind == 4:
            text = text[:at] + rng.choice(LONG_BODIES) + text[at:]
        else:
            noise = "".join(
                chr(rng.choice([rng.randint(32, 126), rng.randint(160, 0x2FFF)]))
                for _ in range(rng.randint(1, 8))
            )
            text = text[:at] + noise + text[at:]
    declared = next((c.tools for c in own if c.tool_call == tool_call and c.tools), None)
    options = {
        "reasoning": reasoning,
        "tool_call": tool_call,
        "tools": declared if rng.random() < 0.5 else None,
        "in_reasoning": rng.choice([None, True, False]),
        "dialect": rng.choice(["dynamo", "vllm", "sglang"]),
    }
    return options, text


def random_cuts(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 24))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def check_streams_as_parsed(options: dict[str, Any], text: str, pieces: list[str]) -> None:
    batch = parsed(text, options)
    label = f"{options} {text!r}"
    got = streamed(options, pieces, stream_arguments=False)
    assert {**got, "tool_calls": None} == {**batch, "tool_calls": None}, label
    named = [(c["name"], c["arguments"]) for c in got["tool_calls"]]
    assert named == [(c["name"], c["arguments"]) for c in batch["tool_calls"]], label
    if not batch["errors"]:
        got = streamed(options, pieces, stream_arguments=True)
        assert got["content"] == batch["content"], label
        assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == named, label


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PAIRS), st.randoms(use_true_random=False))
def test_malformed_output_streams_as_it_parses(
    pair: tuple[str | None, str | None], rng: random.Random
) -> None:
    options, text = malformed_output(rng, *pair)
    check_streams_as_parsed(options, text, random_cuts(rng, text))
    check_streams_as_parsed(options, text, [text[i : i + 7] for i in range(0, len(text), 7)])


@pytest.mark.parametrize("reasoning", [None, *sorted(reasoning_parsers())])
def test_every_pair_streams_malformed_output_as_it_parses(reasoning: str | None) -> None:
    rng = random.Random(f"{reasoning}")
    for tool_call in [None, *sorted(tool_call_parsers())]:
        for _ in range(3):
            options, text = malformed_output(rng, reasoning, tool_call)
            check_streams_as_parsed(options, text, random_cuts(rng, text))


def test_issue_example() -> None:
    message = parse(
        '<think>a</think>b<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        reasoning="deepseek_r1",
        tool_call="hermes",
    )
    assert message.reasoning_content == "a"
    assert message.content == "b"
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", "{}")]
    assert message.tool_calls[0].id.startswith("call-")


def test_names_and_aliases() -> None:
    tools = tool_call_parsers()
    assert "qwen25" in tools["hermes"] and "qwen" in tools["hermes"]
    assert {"openai", "gpt-oss"} <= set(tools["harmony"])
    assert "deepseekv31" in tools["deepseek_v3_1"]
    assert "deepseek-r1" in reasoning_parsers()["deepseek_r1"]
    for name, aliases in [*tools.items(), *reasoning_parsers().items()]:
        assert name not in aliases


def test_unknown_parser_lists_valid_names() -> None:
    with pytest.raises(shakedown.UnknownParserError) as info:
        ToolCallParser("no-such-format")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, shakedown.ShakedownError)
    assert "hermes" in str(info.value) and "no-such-format" in str(info.value)
    with pytest.raises(shakedown.UnknownParserError):
        ReasoningParser("nope")


def test_aliases_parse_like_canonical() -> None:
    text = 'x<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    for name in ["hermes", "qwen25", "qwen"]:
        message = parse(text, tool_call=name)
        assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", '{"a": 1}')]


def test_reasoning_parser_delta_has_no_calls() -> None:
    parser = ReasoningParser("deepseek_r1")
    first = parser.feed("thinking</th")
    assert first.reasoning_content == "thinking" and first.content is None
    second = parser.feed("ink>answer")
    rest = parser.finish()
    assert (second.content or "") + (rest.content or "") == "answer"
    assert second.calls == [] and rest.calls == []


def test_reasoning_parser_ends_at_the_calls_of_its_tool_family() -> None:
    # vLLM's Qwen3 reads unmarked output as reasoning; a hermes call ends it, and the call's
    # text comes out as content for a tool parser run apart (the vLLM plugin's pairing).
    text = 'plan\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    alone = ReasoningParser("qwen3", dialect="vllm")
    paired = ReasoningParser("qwen3", dialect="vllm", tool_call="hermes")
    for parser, reasoning, content in ((alone, text, ""), (paired, "plan\n", text[5:])):
        deltas = [parser.feed(c) for c in text] + [parser.finish()]
        assert "".join(d.reasoning_content or "" for d in deltas) == reasoning
        assert "".join(d.content or "" for d in deltas) == content
        assert all(d.calls == [] for d in deltas)


def test_tool_parser_whole_calls_mode() -> None:
    parser = ToolCallParser("hermes", stream_arguments=False)
    text = '<tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call>'
    deltas = [parser.feed(c) for c in text] + [parser.finish()]
    calls = [c for d in deltas for c in d.calls]
    assert len(calls) == 1 and calls[0].arguments == '{"a": [1, 2]}'


def test_tools_must_be_definitions() -> None:
    with pytest.raises(shakedown.ShakedownError):
        ToolCallParser("qwen3_coder", tools=[{"type": "function", "function": {}}])


def test_malformed_call_is_state_not_exception() -> None:
    message = parse('<tool_call>{"name": "f", "arguments": {bad}}</tool_call>', tool_call="hermes")
    assert message.tool_calls == []
    assert len(message.errors) == 1 and message.errors[0]["index"] == 0
    json.dumps(message.errors)


def test_force_reasoning_is_in_reasoning_under_sglangs_name() -> None:
    for options in ({"force_reasoning": True}, {"in_reasoning": True}):
        message = parse("plan</seed:think>Hi", reasoning="seed_oss", **options)
        assert (message.reasoning_content, message.content) == ("plan", "Hi")
    # An explicit in_reasoning wins over force_reasoning.
    message = parse("Hi", reasoning="seed_oss", force_reasoning=True, in_reasoning=False)
    assert (message.reasoning_content, message.content) == (None, "Hi")


def test_thinking_off_through_every_constructor() -> None:
    text = "<think>plan</think>Hi"
    assert parse(text, reasoning="deepseek_r1", thinking=False).content == text
    streamed = ChatParser(reasoning="deepseek_r1", thinking=False)
    assert (streamed.feed(text).content or "") + (streamed.finish().content or "") == text
    alone = ReasoningParser("nemotron_v3", force_nonempty_content=True)
    assert (alone.feed(text).content or "") + (alone.finish().content or "") == text


def test_an_unknown_dialect_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="valid dialects: dynamo, vllm, sglang"):
        ChatParser(tool_call="hermes", dialect="tgi")
    with pytest.raises(ValueError):
        parse("x", dialect="")


MALFORMED = policy()["cases"]


@pytest.mark.parametrize(
    "case", MALFORMED, ids=[f"{c['tool_call']}/{c['kind']}" for c in MALFORMED]
)
def test_malformed_output_gives_the_recorded_answer(case: dict[str, Any]) -> None:
    """Dynamo 1.6.1's answer, or shakedown's recorded deviation from it (docs/parsers.md)."""
    want = case.get("shakedown") or case["dynamo"]
    options = {"tool_call": case["tool_call"], "tools": tools_of(case["tool_call"])}
    for got in (
        parsed(case["text"], options),
        streamed(options, list(case["text"]), stream_arguments=False),
    ):
        calls = [{"name": c["name"], "arguments": c["arguments"]} for c in got["tool_calls"]]
        assert {"content": got["content"], "tool_calls": calls} == want


def test_malformed_output_table_in_the_docs_is_the_recorded_one() -> None:
    docs = Path(__file__).parent.parent / "docs" / "parsers.md"
    assert policy_table() in docs.read_text(encoding="utf-8")


def test_family_and_name_counts_in_the_docs_are_the_registry_s() -> None:
    """The counts README.md and docs/parsers.md state, as the registry has them."""
    tool, reasoning = tool_call_parsers(), reasoning_parsers()

    def names(families: dict[str, list[str]]) -> int:
        return sum(1 + len(aliases) for aliases in families.values())

    root = Path(__file__).parent.parent
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    docs = " ".join((root / "docs" / "parsers.md").read_text(encoding="utf-8").split())
    assert (
        f"{len(tool)} tool-call and {len(reasoning)} reasoning families" in readme
        and f"({names(tool)} tool-call and {names(reasoning)} reasoning names)" in readme
    )
    assert (
        f"{len(tool)} tool-call families ({names(tool)} names) and "
        f"{len(reasoning)} reasoning families ({names(reasoning)} names)" in docs
    )


def test_tools_as_json_text_read_as_the_list() -> None:
    tools = tools_of("qwen3_coder")
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    as_list = parse(text, tool_call="qwen3_coder", tools=tools)
    for _ in range(2):  # the second reads the cached tools
        as_text = parse(text, tool_call="qwen3_coder", tools=json.dumps(tools))
        assert [(c.name, c.arguments) for c in as_text.tool_calls] == [
            (c.name, c.arguments) for c in as_list.tool_calls
        ]
    with pytest.raises(InvalidToolsError):
        parse(text, tool_call="qwen3_coder", tools="[{")
