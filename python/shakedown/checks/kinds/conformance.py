"""``conformance``: the endpoint speaks the OpenAI API's shapes.

Each item is one testcase; none compares two answers of the engine (it need not be
deterministic), except ``stop-sequence``'s exact cut when the suite says it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import orjson

from ..answers import Answer, first_choice, ok_json, stream_answer, stream_chunks, unary_answer
from ..context import SEA_PROMPT, RunContext
from ..results import CheckFailed, CheckSkipped, Verdict
from ..suite import CheckSpec

Item = Literal[
    "models",
    "chat",
    "stream",
    "stream-usage",
    "completions",
    "max-tokens",
    "stop-sequence",
    "bad-input",
    "n",
]
# `n` is opt-in: Dynamo 1.6.1 answers one choice whatever `n` says.
DEFAULT_ITEMS: tuple[Item, ...] = (
    "models",
    "chat",
    "stream",
    "stream-usage",
    "completions",
    "max-tokens",
    "stop-sequence",
    "bad-input",
)
# Stop strings nearly any answer (or reasoning) reaches within a few tokens.
COMMON_STOPS = ["e", "。"]
# How often a check may re-ask when the answer proves nothing either way.
INCONCLUSIVE_TRIES = 3


@dataclass(frozen=True)
class Options:
    items: list[Item] = field(default_factory=lambda: list(DEFAULT_ITEMS))
    # Require OpenAI's error body, {"error": {"message": ...}}; otherwise a flat
    # {"message": ...} (Dynamo's) is accepted too.
    openai_errors: bool = False

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("items must name at least one item")


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    cases = ctx.run_cases(
        [(item, partial(ITEMS[item], ctx, spec, options)) for item in options.items]
    )
    failed = [c for c in cases if c.outcome == "failed"]
    if len(cases) == 1:
        only = cases[0]
        if only.outcome == "skipped":
            raise CheckSkipped(only.reason)
        return Verdict(not failed, only.reason, tuple(cases))
    if failed:
        reason = "; ".join(f"{c.name}: {c.reason}" for c in failed)
    else:
        passed = sum(c.outcome == "passed" for c in cases)
        reason = f"{passed} of {len(cases)} items passed"
    return Verdict(not failed, reason, tuple(cases))


def chat_body(ctx: RunContext, spec: CheckSpec, **fields: Any) -> dict[str, Any]:
    """The shared chat request (the sea prompt); the same body is answered once per run."""
    return ctx.request(spec, messages=[{"role": "user", "content": SEA_PROMPT}], **fields)


def item_models(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    data = ok_json(ctx.client.get("/models"), "GET /models")
    entries = data.get("data")
    if not isinstance(entries, list):
        raise CheckFailed("GET /models: no 'data' list")
    ids = [entry.get("id") for entry in entries if isinstance(entry, dict)]
    if not ctx.settings.model:
        if not ids or not isinstance(ids[0], str):
            raise CheckFailed("GET /models lists no model and DYN_VALIDATION_MODEL is not set")
        ctx.use_model(ids[0])
        return f"using the first listed model {ids[0]!r}"
    if ctx.settings.model not in ids:
        raise CheckFailed(f"model {ctx.settings.model!r} is not listed; listed: {ids}")
    return f"{ctx.settings.model!r} is listed"


def item_chat(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    answer = ctx.unary_chat(chat_body(ctx, spec), "chat")
    if not answer.content and not answer.reasoning:
        raise CheckFailed("chat: the answer has neither content nor reasoning_content")
    if answer.finish_reason not in ("stop", "length"):
        raise CheckFailed(f"chat: finish_reason {answer.finish_reason!r}")
    if answer.usage is not None and not answer.usage.get("completion_tokens"):
        raise CheckFailed(f"chat: usage reports no completion tokens: {answer.usage}")
    return f"{len(answer.content)} characters, finish_reason {answer.finish_reason!r}"


def item_stream(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    stream = ctx.client.stream("/chat/completions", chat_body(ctx, spec, stream=True))
    answer = stream_answer(stream, "chat stream")
    first = (stream.chunks[0].get("choices") or [{}])[0].get("delta") or {}
    if first.get("role") != "assistant":
        raise CheckFailed(f"chat stream: the first delta has role {first.get('role')!r}")
    if not answer.content and not answer.reasoning:
        raise CheckFailed("chat stream: no content or reasoning_content deltas")
    return f"{len(stream.chunks)} chunks, finish_reason {answer.finish_reason!r}"


def item_stream_usage(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    body = chat_body(ctx, spec, stream=True, stream_options={"include_usage": True})
    stream = ctx.client.stream("/chat/completions", body)
    chunks = stream_chunks(stream, "stream usage", "chat.completion.chunk")
    last = chunks[-1]
    usage = last.get("usage")
    if not isinstance(usage, dict):
        raise CheckFailed("stream usage: include_usage is set but the last chunk has no usage")
    if last.get("choices"):
        raise CheckFailed("stream usage: the usage chunk should have empty choices")
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if not isinstance(usage.get(key), int):
            raise CheckFailed(f"stream usage: usage has no integer {key!r}: {usage}")
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        raise CheckFailed(f"stream usage: total_tokens is not prompt + completion: {usage}")
    if any(isinstance(chunk.get("usage"), dict) for chunk in chunks[:-1]):
        raise CheckFailed("stream usage: usage came before the last chunk without continuous_usage")
    return f"{usage['completion_tokens']} completion tokens reported last"


def item_completions(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    body = ctx.request(spec, prompt="The capital of France is", max_tokens=8)
    body.pop("seed", None)
    data = ok_json(ctx.client.post("/completions", body), "completions")
    if data.get("object") != "text_completion":
        raise CheckFailed(f"completions: object is {data.get('object')!r}")
    choice = first_choice(data, "completions")
    if not isinstance(choice.get("text"), str):
        raise CheckFailed("completions: choice has no text")
    if choice.get("finish_reason") not in ("stop", "length"):
        raise CheckFailed(f"completions: finish_reason {choice.get('finish_reason')!r}")
    return f"text {choice['text'][:40]!r}"


def item_max_tokens(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    messages = [{"role": "user", "content": "Count from 1 to 100, separated by spaces."}]
    body = ctx.request(spec, messages=messages, max_tokens=3)
    for _ in range(INCONCLUSIVE_TRIES):
        answer = _fresh(ctx, body, "max_tokens")
        usage = answer.usage or {}
        tokens = usage.get("completion_tokens")
        if isinstance(tokens, int) and tokens > 3:
            raise CheckFailed(f"max_tokens=3 but {tokens} tokens were generated")
        if answer.finish_reason == "length":
            return "finish_reason 'length'"
        if answer.finish_reason != "stop":
            raise CheckFailed(f"max_tokens=3: finish_reason {answer.finish_reason!r}, not 'length'")
        # The model ended by itself within 3 tokens: that proves nothing about max_tokens.
    raise CheckSkipped("the model ended by itself within 3 tokens every time")


def _fresh(ctx: RunContext, body: dict[str, Any], what: str) -> Answer:
    return unary_answer(ok_json(ctx.client.post("/chat/completions", body), what), what)


def item_stop_sequence(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    if ctx.deterministic:
        return _exact_stop(ctx, spec)
    # A stop string nearly any text reaches: the answer must end there, without it.
    for _ in range(INCONCLUSIVE_TRIES):
        outcome = _common_stop(ctx, spec, stream=False)
        if outcome is not None:
            streamed = _common_stop(ctx, spec, stream=True)
            return f"{outcome}; streamed: {streamed or 'no stop string reached'}"
    raise CheckSkipped(f"no answer reached any of the stop strings {COMMON_STOPS}")


def _common_stop(ctx: RunContext, spec: CheckSpec, *, stream: bool) -> str | None:
    what = "stop sequence (stream)" if stream else "stop sequence"
    body = chat_body(ctx, spec, stop=COMMON_STOPS, stream=stream)
    if stream:
        answer = stream_answer(ctx.client.stream("/chat/completions", body), what)
    else:
        answer = _fresh(ctx, body, what)
    for stop in COMMON_STOPS:
        for part, text in (("content", answer.content), ("reasoning_content", answer.reasoning)):
            if stop in text:
                raise CheckFailed(f"{what}: stop={stop!r} is in the {part} {text[:160]!r}")
    if answer.finish_reason == "stop":
        return f"stopped before a stop string after {len(answer.reasoning + answer.content)} chars"
    if answer.finish_reason == "length":
        return None  # no stop string came up: nothing proven
    raise CheckFailed(f"{what}: finish_reason {answer.finish_reason!r}")


def _exact_stop(ctx: RunContext, spec: CheckSpec) -> str:
    # A deterministic engine answers the same again: the stopped answer must be exactly
    # the full answer cut before the stop sequence.
    full = ctx.unary_chat(chat_body(ctx, spec), "chat")
    stop = _pick_stop(full.content)
    if stop is None:
        raise CheckSkipped("the answer has no word to stop at")
    answer = _fresh(ctx, chat_body(ctx, spec, stop=[stop]), "stop sequence")
    if answer.finish_reason != "stop":
        raise CheckFailed(f"stop={stop!r}: finish_reason {answer.finish_reason!r}, not 'stop'")
    if stop in answer.content:
        raise CheckFailed(f"stop={stop!r}: the stop sequence is in the output {answer.content!r}")
    # With reasoning the stop may match inside the reasoning first: then content is cut there.
    if not full.reasoning:
        want = full.content[: full.content.find(stop)]
        if answer.content != want:
            raise CheckFailed(
                f"stop={stop!r}: output {answer.content[:160]!r}, want {want[:160]!r}"
            )
    return f"stopped before {stop!r}"


def _pick_stop(content: str) -> str | None:
    words = [
        m.group() for m in re.finditer(r"[A-Za-z]{3,}", content) if content.find(m.group()) > 0
    ]
    return words[len(words) // 2] if words else None


def item_bad_input(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    model = ctx.model
    cases = [
        ("empty messages", ctx.client.post("/chat/completions", {"model": model, "messages": []})),
        (
            "malformed JSON",
            ctx.client.post_raw("/chat/completions", b'{"model": "x", "messages": ['),
        ),
        ("missing messages", ctx.client.post("/chat/completions", {"model": model})),
    ]
    for what, response in cases:
        if not 400 <= response.status < 500:
            raise CheckFailed(f"{what}: HTTP {response.status}, want 4xx: {response.snippet()}")
        _error_body(response.body, what, openai=options.openai_errors)
    alive = ctx.client.get("/models")
    if alive.status != 200:
        raise CheckFailed(f"after bad input GET /models answers HTTP {alive.status}")
    return "all rejected with 4xx and an error message, endpoint still answers"


def _error_body(body: bytes, what: str, *, openai: bool) -> None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: the error body is not JSON: {body[:200]!r}") from None
    nested = data.get("error") if isinstance(data, dict) else None
    if isinstance(nested, dict) and isinstance(nested.get("message"), str):
        return
    if openai:
        raise CheckFailed(
            f"{what}: the error body is not {{'error': {{'message': ...}}}}: {body[:200]!r}"
        )
    if not (isinstance(data, dict) and isinstance(data.get("message"), str)):
        raise CheckFailed(f"{what}: the error body carries no message: {body[:200]!r}")


def item_n(ctx: RunContext, spec: CheckSpec, options: Options) -> str:
    # Several choices only make sense sampled: greedy decoding would give n equal answers.
    data = ok_json(
        ctx.client.post("/chat/completions", chat_body(ctx, spec, n=2, temperature=1.0)), "n=2"
    )
    indexes = sorted(
        c["index"] for c in data.get("choices") or [] if isinstance(c, dict) and "index" in c
    )
    if indexes != [0, 1]:
        raise CheckFailed(f"n=2: choices have indexes {indexes}, want [0, 1]")
    body = chat_body(ctx, spec, n=2, temperature=1.0, stream=True)
    stream = ctx.client.stream("/chat/completions", body)
    finished = sorted(
        int(choice.get("index", -1))
        for chunk in stream_chunks(stream, "n=2 stream", "chat.completion.chunk")
        for choice in chunk.get("choices") or []
        if choice.get("finish_reason") is not None
    )
    if finished != [0, 1]:
        raise CheckFailed(f"n=2 stream: finish_reason came for choices {finished}, want [0, 1]")
    return "two choices, unary and streamed"


ITEMS: dict[str, Callable[[RunContext, CheckSpec, Options], str]] = {
    "models": item_models,
    "chat": item_chat,
    "stream": item_stream,
    "stream-usage": item_stream_usage,
    "completions": item_completions,
    "max-tokens": item_max_tokens,
    "stop-sequence": item_stop_sequence,
    "bad-input": item_bad_input,
    "n": item_n,
}
