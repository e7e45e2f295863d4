"""The reference check runner: does an OpenAI endpoint answer the way a fleet needs it to?

Each check sends real requests and judges the answers; later checks reuse the deterministic
unary chat answer (the stream must concatenate to it, the stop sequence is cut from it).
"""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from .client import Client, Response, Stream

Outcome = Literal["passed", "failed", "skipped"]


class CheckFailed(Exception):
    """The endpoint answered wrongly; the message says how."""


class CheckSkipped(Exception):
    """The check does not apply to this endpoint (or depends on one that failed)."""


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str | None
    model: str | None
    timeout_s: float = 60.0
    max_tokens: int = 64
    expect_reasoning: bool = False
    expect_tools: bool = False


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: Outcome
    duration_s: float
    reason: str


@dataclass
class Context:
    client: Client
    settings: Settings
    model: str = ""
    unary: dict[str, Any] | None = None
    stream_chunks: list[dict[str, Any]] = field(default_factory=list)


# One deterministic request shared by the unary, stream and stop-sequence checks.
def _chat_request(ctx: Context, **extra: Any) -> dict[str, Any]:
    return {
        "model": ctx.model,
        "messages": [
            {"role": "user", "content": "Describe the sea in two short sentences."},
        ],
        "temperature": 0,
        "seed": 1234,
        "max_tokens": ctx.settings.max_tokens,
        **extra,
    }


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


def _ok_json(response: Response, what: str) -> dict[str, Any]:
    if response.status != 200:
        raise CheckFailed(f"{what}: HTTP {response.status}: {response.snippet()}")
    try:
        data = response.json()
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: the body is not JSON: {response.snippet()}") from None
    if not isinstance(data, dict):
        raise CheckFailed(f"{what}: the body is not a JSON object: {response.snippet()}")
    return data


def _first_choice(data: dict[str, Any], what: str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CheckFailed(f"{what}: no choices in {orjson.dumps(data).decode()[:300]}")
    choice: dict[str, Any] = choices[0]
    return choice


def check_models(ctx: Context) -> str:
    data = _ok_json(ctx.client.get("/models"), "GET /models")
    entries = data.get("data")
    if not isinstance(entries, list):
        raise CheckFailed("GET /models: no 'data' list")
    ids = [entry.get("id") for entry in entries if isinstance(entry, dict)]
    if not ctx.model:
        if not ids or not isinstance(ids[0], str):
            raise CheckFailed("GET /models lists no model and DYN_VALIDATION_MODEL is not set")
        ctx.model = ids[0]
        return f"using the first listed model {ctx.model!r}"
    if ctx.model not in ids:
        raise CheckFailed(f"model {ctx.model!r} is not listed; listed: {ids}")
    return f"{ctx.model!r} is listed"


def check_chat(ctx: Context) -> str:
    data = _ok_json(ctx.client.post("/chat/completions", _chat_request(ctx)), "chat")
    if data.get("object") != "chat.completion":
        raise CheckFailed(f"chat: object is {data.get('object')!r}, not 'chat.completion'")
    choice = _first_choice(data, "chat")
    message = choice.get("message")
    if not isinstance(message, dict) or message.get("role") != "assistant":
        raise CheckFailed(f"chat: no assistant message in {orjson.dumps(choice).decode()[:300]}")
    content = message.get("content")
    reasoning = message.get("reasoning_content")
    if not (isinstance(content, str) and content) and not (
        isinstance(reasoning, str) and reasoning
    ):
        raise CheckFailed("chat: the answer has neither content nor reasoning_content")
    if choice.get("finish_reason") not in ("stop", "length"):
        raise CheckFailed(f"chat: finish_reason {choice.get('finish_reason')!r}")
    usage = data.get("usage")
    if isinstance(usage, dict) and not usage.get("completion_tokens"):
        raise CheckFailed(f"chat: usage reports no completion tokens: {usage}")
    ctx.unary = message | {"finish_reason": choice.get("finish_reason")}
    return f"{len(content or '')} characters, finish_reason {choice.get('finish_reason')!r}"


def _collect_stream(stream: Stream, what: str, obj: str) -> list[dict[str, Any]]:
    if stream.status != 200:
        raise CheckFailed(f"{what}: HTTP {stream.status}: {stream.body[:300]!r}")
    if not stream.content_type.startswith("text/event-stream"):
        raise CheckFailed(f"{what}: content-type {stream.content_type!r}, not text/event-stream")
    if stream.problems:
        raise CheckFailed(f"{what}: malformed stream: {'; '.join(stream.problems[:3])}")
    if not stream.chunks:
        raise CheckFailed(f"{what}: the stream carried no chunks")
    ids = {chunk.get("id") for chunk in stream.chunks}
    if len(ids) != 1:
        raise CheckFailed(f"{what}: chunks carry {len(ids)} different ids")
    for chunk in stream.chunks:
        if chunk.get("object") != obj:
            raise CheckFailed(f"{what}: a chunk's object is {chunk.get('object')!r}, not {obj!r}")
    return stream.chunks


def _fold_chat_stream(chunks: list[dict[str, Any]], what: str) -> dict[str, Any]:
    content, reasoning = [], []
    finish: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finish.append(choice["finish_reason"])
    if len(finish) != 1:
        raise CheckFailed(f"{what}: {len(finish)} chunks carry a finish_reason (want exactly 1)")
    return {
        "content": "".join(content),
        "reasoning_content": "".join(reasoning),
        "finish_reason": finish[0],
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def check_chat_stream(ctx: Context) -> str:
    if ctx.unary is None:
        raise CheckSkipped("needs the unary chat answer")
    stream = ctx.client.stream("/chat/completions", _chat_request(ctx, stream=True))
    chunks = _collect_stream(stream, "chat stream", "chat.completion.chunk")
    ctx.stream_chunks = chunks
    folded = _fold_chat_stream(chunks, "chat stream")
    want_content = ctx.unary.get("content") or ""
    if folded["content"] != want_content:
        raise CheckFailed(
            f"chat stream: deltas concatenate to {folded['content'][:120]!r}, "
            f"the unary answer is {want_content[:120]!r}"
        )
    want_reasoning = ctx.unary.get("reasoning_content") or ""
    if folded["reasoning_content"] != want_reasoning:
        raise CheckFailed(
            f"chat stream: reasoning deltas concatenate to {folded['reasoning_content'][:120]!r}, "
            f"the unary reasoning is {want_reasoning[:120]!r}"
        )
    if folded["finish_reason"] != ctx.unary.get("finish_reason"):
        raise CheckFailed(
            f"chat stream: finish_reason {folded['finish_reason']!r}, "
            f"unary {ctx.unary.get('finish_reason')!r}"
        )
    return f"{len(chunks)} chunks, same text as the unary answer"


def check_reasoning(ctx: Context) -> str:
    if not ctx.settings.expect_reasoning:
        raise CheckSkipped("no reasoning parser set (DYN_VALIDATION_EXPECT_REASONING=1 to check)")
    if ctx.unary is None:
        raise CheckSkipped("needs the unary chat answer")
    reasoning = ctx.unary.get("reasoning_content")
    if not isinstance(reasoning, str) or not reasoning.strip():
        raise CheckFailed("a reasoning parser is set but the answer has no reasoning_content")
    content = ctx.unary.get("content") or ""
    for marker in ("<think>", "</think>"):
        if marker in content:
            raise CheckFailed(f"reasoning markup {marker!r} leaked into content")
    if ctx.stream_chunks and not any(
        isinstance((choice.get("delta") or {}).get("reasoning_content"), str)
        for chunk in ctx.stream_chunks
        for choice in chunk.get("choices") or []
    ):
        raise CheckFailed("the stream carried no reasoning_content deltas")
    return f"{len(reasoning)} characters of reasoning_content"


def check_tool_call(ctx: Context) -> str:
    if not ctx.settings.expect_tools:
        raise CheckSkipped("no tool-call parser set (DYN_VALIDATION_EXPECT_TOOLS=1 to check)")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}
    ]
    request = {
        "model": ctx.model,
        "messages": messages,
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "temperature": 0,
        "seed": 1234,
        "max_tokens": max(ctx.settings.max_tokens, 256),
    }
    data = _ok_json(ctx.client.post("/chat/completions", request), "tool call")
    choice = _first_choice(data, "tool call")
    message = choice.get("message") or {}
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        raise CheckFailed(
            f"tool call: no tool_calls; content was {str(message.get('content'))[:160]!r}"
        )
    if choice.get("finish_reason") != "tool_calls":
        raise CheckFailed(f"tool call: finish_reason {choice.get('finish_reason')!r}")
    call = calls[0]
    function = call.get("function") or {}
    if call.get("type") != "function" or not isinstance(call.get("id"), str):
        raise CheckFailed(f"tool call: malformed call {orjson.dumps(call).decode()[:200]}")
    if function.get("name") != "get_weather":
        raise CheckFailed(f"tool call: called {function.get('name')!r}, not 'get_weather'")
    arguments = _tool_arguments(function.get("arguments"), "tool call")

    stream = ctx.client.stream("/chat/completions", request | {"stream": True})
    folded = _fold_chat_stream(
        _collect_stream(stream, "tool call stream", "chat.completion.chunk"), "tool call stream"
    )
    if not folded["tool_calls"]:
        raise CheckFailed("tool call stream: no tool_calls deltas")
    streamed = folded["tool_calls"][0]
    if streamed["name"] != "get_weather":
        raise CheckFailed(f"tool call stream: called {streamed['name']!r}")
    if _tool_arguments(streamed["arguments"], "tool call stream") != arguments:
        raise CheckFailed(
            f"tool call stream: argument deltas concatenate to {streamed['arguments']!r}, "
            f"unary arguments are {function.get('arguments')!r}"
        )

    follow_up = [
        *messages,
        {"role": "assistant", "content": message.get("content"), "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": '{"temperature_c": 18, "conditions": "sunny"}',
        },
    ]
    answer = _ok_json(
        ctx.client.post("/chat/completions", request | {"messages": follow_up}), "tool result"
    )
    reply = _first_choice(answer, "tool result").get("message") or {}
    if not (reply.get("content") or reply.get("tool_calls") or reply.get("reasoning_content")):
        raise CheckFailed("tool result: the model gave no answer after the tool result")
    return f"get_weather({orjson.dumps(arguments).decode()}), round trip answered"


def _tool_arguments(raw: object, what: str) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise CheckFailed(f"{what}: arguments are not a JSON string: {raw!r}")
    try:
        arguments = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: arguments are not valid JSON: {raw[:200]!r}") from None
    problem = schema_problem(arguments, WEATHER_TOOL["function"]["parameters"])
    if problem:
        raise CheckFailed(f"{what}: arguments {raw[:200]!r} do not match the schema: {problem}")
    assert isinstance(arguments, dict)
    return arguments


_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_problem(value: object, schema: dict[str, Any], path: str = "$") -> str | None:
    """What makes ``value`` not match ``schema`` (type, enum, properties, required), or None."""
    kind = schema.get("type")
    if isinstance(kind, str) and not _JSON_TYPES[kind](value):
        return f"{path} should be {kind}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} should be one of {schema['enum']}, got {value!r}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                return f"{path} is missing required {name!r}"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                problem = schema_problem(item, properties[name], f"{path}.{name}")
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return f"{path} has unexpected property {name!r}"
    return None


def check_completions(ctx: Context) -> str:
    request = {
        "model": ctx.model,
        "prompt": "The capital of France is",
        "max_tokens": 8,
        "temperature": 0,
    }
    data = _ok_json(ctx.client.post("/completions", request), "completions")
    if data.get("object") != "text_completion":
        raise CheckFailed(f"completions: object is {data.get('object')!r}")
    choice = _first_choice(data, "completions")
    if not isinstance(choice.get("text"), str):
        raise CheckFailed("completions: choice has no text")
    if choice.get("finish_reason") not in ("stop", "length"):
        raise CheckFailed(f"completions: finish_reason {choice.get('finish_reason')!r}")
    return f"text {choice['text'][:40]!r}"


def check_max_tokens(ctx: Context) -> str:
    request = {
        "model": ctx.model,
        "messages": [{"role": "user", "content": "Count from 1 to 100, separated by spaces."}],
        "temperature": 0,
        "max_tokens": 3,
    }
    data = _ok_json(ctx.client.post("/chat/completions", request), "max_tokens")
    choice = _first_choice(data, "max_tokens")
    if choice.get("finish_reason") != "length":
        raise CheckFailed(
            f"max_tokens=3: finish_reason {choice.get('finish_reason')!r}, not 'length'"
        )
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int) and tokens > 3:
        raise CheckFailed(f"max_tokens=3 but {tokens} tokens were generated")
    return "finish_reason 'length'"


def check_stop_sequence(ctx: Context) -> str:
    if ctx.unary is None:
        raise CheckSkipped("needs the unary chat answer")
    content = ctx.unary.get("content") or ""
    stop = _pick_stop(content)
    if stop is None:
        raise CheckSkipped("the unary answer has no word to stop at")
    data = _ok_json(
        ctx.client.post("/chat/completions", _chat_request(ctx, stop=[stop])), "stop sequence"
    )
    choice = _first_choice(data, "stop sequence")
    got = (choice.get("message") or {}).get("content") or ""
    if choice.get("finish_reason") != "stop":
        raise CheckFailed(
            f"stop={stop!r}: finish_reason {choice.get('finish_reason')!r}, not 'stop'"
        )
    if stop in got:
        raise CheckFailed(f"stop={stop!r}: the stop sequence is in the output {got[:160]!r}")
    # With reasoning the stop may match inside the hidden reasoning text first, so only a
    # plain answer must equal the unary answer cut just before the stop sequence.
    if not ctx.settings.expect_reasoning:
        want = content[: content.find(stop)]
        if got != want:
            raise CheckFailed(f"stop={stop!r}: output {got[:160]!r}, want {want[:160]!r}")
    return f"stopped before {stop!r}"


def _pick_stop(content: str) -> str | None:
    words = [
        m.group() for m in re.finditer(r"[A-Za-z]{3,}", content) if content.find(m.group()) > 0
    ]
    if not words:
        return None
    return words[len(words) // 2]


def check_bad_input(ctx: Context) -> str:
    cases: list[tuple[str, Response]] = [
        (
            "empty messages",
            ctx.client.post("/chat/completions", {"model": ctx.model, "messages": []}),
        ),
        (
            "malformed JSON",
            ctx.client.post_raw("/chat/completions", b'{"model": "x", "messages": ['),
        ),
        (
            "missing messages",
            ctx.client.post("/chat/completions", {"model": ctx.model}),
        ),
    ]
    for what, response in cases:
        if not 400 <= response.status < 500:
            raise CheckFailed(f"{what}: HTTP {response.status}, want 4xx: {response.snippet()}")
    alive = ctx.client.get("/models")
    if alive.status != 200:
        raise CheckFailed(f"after bad input GET /models answers HTTP {alive.status}")
    return "all rejected with 4xx, endpoint still answers"


CHECKS: tuple[tuple[str, Callable[[Context], str]], ...] = (
    ("models", check_models),
    ("chat", check_chat),
    ("chat-stream", check_chat_stream),
    ("reasoning", check_reasoning),
    ("tool-call", check_tool_call),
    ("completions", check_completions),
    ("max-tokens", check_max_tokens),
    ("stop-sequence", check_stop_sequence),
    ("bad-input", check_bad_input),
)


def run_checks(
    settings: Settings, progress: Callable[[int, int, CheckResult], None] | None = None
) -> list[CheckResult]:
    ctx = Context(
        client=Client(settings.base_url, settings.api_key, settings.timeout_s),
        settings=settings,
        model=settings.model or "",
    )
    results: list[CheckResult] = []
    for number, (name, check) in enumerate(CHECKS, 1):
        start = time.monotonic()
        outcome: Outcome
        try:
            reason = check(ctx)
            outcome = "passed"
        except CheckFailed as exc:
            outcome, reason = "failed", str(exc)
        except CheckSkipped as exc:
            outcome, reason = "skipped", str(exc)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # Connection errors and timeouts are the endpoint failing the check, not a crash.
            outcome, reason = "failed", f"request failed: {exc!r}"
        result = CheckResult(name, outcome, time.monotonic() - start, reason)
        results.append(result)
        if progress is not None:
            progress(number, len(CHECKS), result)
    return results
