"""``reasoning``: reasoning arrives in ``reasoning_content`` when thinking is on, and not at
all when the request turns it off (``disabled_body``, e.g. ``chat_template_kwargs``).

Each half is judged on a unary and a streamed answer, with no comparison between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..answers import Answer, chat_answer
from ..context import SEA_PROMPT, RunContext
from ..results import CheckFailed, Verdict
from ..suite import CheckSpec


@dataclass(frozen=True)
class Options:
    messages: list[dict[str, Any]] | None = None
    # Merged into the thinking request (e.g. {chat_template_kwargs = {enable_thinking = true}}).
    enabled_body: dict[str, Any] = field(default_factory=dict)
    # Merged into a second request that must come back without reasoning; unset: not checked.
    disabled_body: dict[str, Any] | None = None
    # Reasoning markup that must never show up in content.
    leak_markers: list[str] = field(default_factory=lambda: ["<think>", "</think>"])
    stream: bool = True


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    messages = options.messages or [{"role": "user", "content": SEA_PROMPT}]
    halves = [("enabled", options.enabled_body, True)]
    if options.disabled_body is not None:
        halves.append(("disabled", options.disabled_body, False))
    sides = ["unary", "stream"] if options.stream else ["unary"]

    def case(body: dict[str, Any], side: str, thinking: bool, name: str) -> str:
        answer = chat_answer(ctx.client, body, side == "stream", name)
        return judge(answer, thinking, options.leak_markers, name)

    cases = []
    for half, extra, thinking in halves:
        body = ctx.request(spec, messages=messages) | extra
        for side in sides:
            name = f"{half}/{side}"
            cases.append((name, partial(case, body, side, thinking, name)))
    return Verdict.of_cases(ctx.run_cases(cases))


def judge(answer: Answer, thinking: bool, leak_markers: list[str], what: str) -> str:
    for marker in leak_markers:
        if marker in answer.content:
            raise CheckFailed(f"{what}: reasoning markup {marker!r} leaked into content")
    if thinking:
        if not answer.reasoning.strip():
            raise CheckFailed(
                f"{what}: thinking is on but there is no reasoning_content; "
                f"content {answer.content[:120]!r}"
            )
        return f"{what}: {len(answer.reasoning)} characters of reasoning_content"
    if answer.reasoning:
        raise CheckFailed(
            f"{what}: thinking is off but reasoning_content came back: {answer.reasoning[:120]!r}"
        )
    if not answer.content.strip():
        raise CheckFailed(f"{what}: thinking is off and the answer has no content")
    return f"{what}: no reasoning, {len(answer.content)} characters of content"
