"""``consistency``: a streamed answer agrees with the unary answer to the same request.

Engines are not bit-deterministic across requests (sampling, batching, random mockers), so
by default only structure is compared: both well-formed, the same class of finish (a natural
end — ``stop`` or ``length`` — versus ``tool_calls``), the same tools called in the same
order, and every call's arguments valid JSON that matches the tool's schema. Only when the
suite (or the check) says the engine is deterministic must the texts be byte-equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from ..answers import Answer, checked_calls, stream_answer
from ..context import SEA_PROMPT, RunContext
from ..results import CheckFailed, Verdict
from ..suite import CheckSpec, read_cases

# The tool-call pair asks the default suite's tool-call case.
TOOL_CASE = "builtin:weather.jsonl"


@dataclass(frozen=True)
class Options:
    # "auto": the tool-call pair runs when the worker has a tool-call parser.
    tools: Literal["auto", "on", "off"] = "auto"
    # The chat pair's messages (default: a one-line question).
    messages: list[dict[str, Any]] | None = None
    # None: the suite's `deterministic`.
    deterministic: bool | None = None


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    deterministic = ctx.deterministic if options.deterministic is None else options.deterministic
    messages = options.messages or [{"role": "user", "content": SEA_PROMPT}]
    pairs: list[tuple[str, dict[str, Any]]] = [("chat", ctx.request(spec, messages=messages))]
    if options.tools == "on" or (options.tools == "auto" and ctx.settings.expect_tools):
        case = read_cases(ctx.suite, TOOL_CASE, spec.name)[0]
        body = ctx.request(
            spec,
            defaults={"max_tokens": max(ctx.max_tokens, 256)},
            messages=case["messages"],
            tools=case["tools"],
            tool_choice="auto",
        )
        pairs.append(("tools", body))
    cases = ctx.run_cases(
        [(name, partial(compare_pair, ctx, name, body, deterministic)) for name, body in pairs]
    )
    mode = "byte-equal" if deterministic else "structurally equal"
    return Verdict.of_cases(cases, prefix=f"stream and unary {mode}: ")


def compare_pair(ctx: RunContext, name: str, body: dict[str, Any], deterministic: bool) -> str:
    unary = ctx.unary_chat(body, f"{name} (unary)")
    streamed = stream_answer(
        ctx.client.stream("/chat/completions", body | {"stream": True}), f"{name} (stream)"
    )
    problems = differences(unary, streamed, body.get("tools"), deterministic)
    if problems:
        raise CheckFailed(f"{name}: " + "; ".join(problems))
    calls = f", calls {unary.names}" if unary.calls else ""
    return f"{name}: finish {streamed.finish_reason!r}{calls}"


def finish_class(reason: str | None) -> str:
    """A natural end (``stop``, ``length``) is one class: where a sampled answer ends varies."""
    return "end" if reason in ("stop", "length") else str(reason)


def differences(unary: Answer, streamed: Answer, tools: object, deterministic: bool) -> list[str]:
    """What differs between two answers to one request, in terms the engine guarantees."""
    problems = []
    if finish_class(unary.finish_reason) != finish_class(streamed.finish_reason):
        problems.append(
            f"finish_reason {streamed.finish_reason!r} streamed, {unary.finish_reason!r} unary"
        )
    if unary.names != streamed.names:
        problems.append(f"the stream called {streamed.names}, the unary answer {unary.names}")
    for side, answer in (("unary", unary), ("stream", streamed)):
        if answer.calls and tools is not None:
            try:
                checked_calls(answer, tools, side)
            except CheckFailed as exc:
                problems.append(str(exc))
    if deterministic:
        for what, a, b in (
            ("content", streamed.content, unary.content),
            ("reasoning_content", streamed.reasoning, unary.reasoning),
            ("finish_reason", streamed.finish_reason, unary.finish_reason),
        ):
            if a != b:
                problems.append(f"{what} streamed {_clip(a)}, unary {_clip(b)}")
        for (name, got), (_, want) in zip(streamed.calls, unary.calls):
            if got != want:
                problems.append(f"{name} arguments streamed {_clip(got)}, unary {_clip(want)}")
    return problems


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
