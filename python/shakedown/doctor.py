"""``shakedown doctor``: prove that the configured parsers read what the chat template writes.

The most common field failure is a reasoning or tool-call parser that does not match the
model's template: reasoning never parsed, tool markup leaked into content or swallowed. The
doctor renders, with the model's own template, an assistant turn that thinks, answers and
calls a tool; takes what the template wrote as what the model would say; and checks that

- the worker's pipeline, with the configured parsers, answers that output with the same
  reasoning and the same call (exactly as a request would be answered);
- the markers the template uses are tokens of the vocabulary (a model emits tokens);
- ``chat_template_kwargs`` the caller relies on change the rendered prompt.

Every mismatch comes with its fix: the parsers that do read the template's markup, the
model's own family (``config.json``'s ``model_type``) first. What a template does not show
(an assistant's reasoning or tool calls) cannot be proven either way: that is a warning,
never a failure. At attach, an error holds the worker with the finding as the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from shakedown._core import ModelError, Pipeline, RequestError
from shakedown.parsers import parse, reasoning_parsers, tool_call_parsers

Level = Literal["ok", "warning", "error"]

QUESTION = "What is the weather in Paris?"
REASONING = "The user asks about the weather there, so I look it up."
ANSWER = "Let me check that."
CALL_ARGUMENTS = {"city": "Paris"}
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# A marker: a bracketed special-token-like run (<tool_call>, <|channel|>, [TOOL_CALLS], <｜…｜>).
_MARKER = re.compile(r"<[^<>\s]{1,60}>|\[[A-Z_]{2,40}\]")


@dataclass(frozen=True)
class Finding:
    level: Level
    topic: str
    message: str

    def line(self) -> str:
        mark = {"ok": "ok  ", "warning": "warn", "error": "FAIL"}[self.level]
        return f"{mark}  {self.topic}: {self.message}"


@dataclass(frozen=True)
class Turn:
    """What the template wrote for one assistant turn, cut from the prompt around it."""

    text: str  # the turn as the model would generate it after the prompt, end-of-turn included


def canonical(name: str, table: Mapping[str, list[str]]) -> str | None:
    wanted = name.strip().lower()
    for canon, aliases in table.items():
        if wanted == canon.lower() or wanted in (a.lower() for a in aliases):
            return canon
    return None


class Doctor:
    """Checks one model's template against its configured parsers."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        reasoning_parser: str | None,
        tool_call_parser: str | None,
        model_type: str = "",
    ) -> None:
        self.pipeline = pipeline
        self.reasoning_parser = reasoning_parser
        self.tool_call_parser = tool_call_parser
        self.model_type = model_type.lower()

    # --- rendering through the worker's own pipeline -------------------------------------

    def render(self, body: dict[str, Any]) -> str:
        request = {"model": self.pipeline.served_name, "max_tokens": 1} | body
        exchange = self.pipeline.chat(orjson.dumps(request), "shakedown-doctor")
        ids = orjson.loads(exchange.engine_request)["token_ids"]
        return self.pipeline.decode(ids)

    def turn(self, assistant: dict[str, Any], tools: list[dict[str, Any]] | None) -> Turn:
        """The assistant turn as the template writes it after the question."""
        base: dict[str, Any] = {"tools": tools} if tools else {}
        user = [{"role": "user", "content": QUESTION}]
        prompt = self.render(base | {"messages": user})
        history = self.render(
            base | {"messages": [*user, assistant], "add_generation_prompt": False}
        )
        # Where the prompt opens more than the conversation shows (a `<think>` the generation
        # prompt adds), the model's output starts after the part both share.
        return Turn(text=history[_common_prefix(prompt, history) :])

    # --- the checks ----------------------------------------------------------------------

    def run(self, template_kwargs: Mapping[str, Any] | None = None) -> list[Finding]:
        call = {
            "id": "call_doctor_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(CALL_ARGUMENTS)},
        }
        assistant = {
            "role": "assistant",
            "content": ANSWER,
            "reasoning_content": REASONING,
            "tool_calls": [call],
        }
        findings: list[Finding] = []
        try:
            turn = self.turn(assistant, [PROBE_TOOL])
        except RequestError as exc:
            message = f"the template fails on an assistant turn that thinks and calls a tool: {exc}"
            return [Finding("warning", "template", message)]
        probe = Probe(turn, folded=self.pipeline.folds_reasoning)
        answer = self.answer_as_worker(probe)
        findings.append(self.check_reasoning(probe, answer))
        findings.append(self.check_tool_calls(probe, answer))
        findings.extend(self.check_markers(probe))
        if template_kwargs:
            findings.append(self.check_kwargs(template_kwargs))
        return [f for f in findings if f.message]

    def answer_as_worker(self, probe: Probe) -> dict[str, Any] | None:
        """The worker's answer when the model says the probe turn, or None when that would
        not be what the model says (the template keeps no reasoning, so the turn lacks the
        thinking the configured reasoning parser expects first)."""
        if self.reasoning_parser and not probe.reasoning:
            return None
        if not (self.reasoning_parser or self.tool_call_parser):
            return None
        body: dict[str, Any] = {"messages": [{"role": "user", "content": QUESTION}]}
        body["tools"] = [PROBE_TOOL]
        return self.answer(body, probe.turn.text)

    def check_reasoning(self, probe: Probe, answer: dict[str, Any] | None) -> Finding:
        configured = self.reasoning_parser
        if not probe.reasoning:
            if not configured:
                return Finding("ok", "reasoning", "")
            why = (
                "does not read an assistant's reasoning_content"
                if probe.folded
                else "drops an assistant's reasoning from the conversation"
            )
            return Finding(
                "warning",
                "reasoning",
                f"the template {why}, so the `{configured}` parser cannot be proven from it",
            )
        markup = probe.reasoning_markup
        found = self._ranked(
            [
                name
                for name in reasoning_parsers()
                if any(
                    (
                        parse(
                            probe.turn.text, reasoning=name, in_reasoning=opened
                        ).reasoning_content
                        or ""
                    ).strip()
                    == REASONING
                    for opened in (None, True)
                )
            ]
        )
        if not configured:
            if not found:
                return Finding("ok", "reasoning", "")
            return Finding(
                "warning",
                "reasoning",
                f"the template wraps reasoning in {markup} but no reasoning parser is set: "
                f"reasoning would arrive as content; use {_choice(found)}",
            )
        assert answer is not None
        got = (answer.get("reasoning_content") or "").strip()
        if got == REASONING:
            return Finding(
                "ok", "reasoning", f"the template's {markup} reads back through `{configured}`"
            )
        what = f"reads the reasoning as {got[:60]!r}" if got else "finds no reasoning in it"
        if not found:
            return Finding(
                "warning",
                "reasoning",
                f"the template wraps reasoning in {markup}; `{configured}` {what}, and no known "
                "parser reads it back",
            )
        return Finding(
            "error",
            "reasoning",
            f"the template wraps reasoning in {markup} but the configured reasoning parser is "
            f"`{configured}` ({what}): use {_choice(found)}",
        )

    def check_tool_calls(self, probe: Probe, answer: dict[str, Any] | None) -> Finding:
        configured = self.tool_call_parser
        if not probe.call:
            if not configured:
                return Finding("ok", "tool calls", "")
            return Finding(
                "warning",
                "tool calls",
                "the template does not render an assistant's tool calls, so the "
                f"`{configured}` parser cannot be proven from it",
            )
        emits = f"`{probe.call_markup}`" if probe.call_markup else "bare JSON"
        found = self._ranked(
            [
                name
                for name in tool_call_parsers()
                if _is_probe_call(
                    parse(probe.turn.text, tool_call=name, tools=[PROBE_TOOL]).tool_calls
                )
            ]
        )
        if not configured:
            if not found:
                return Finding("ok", "tool calls", "")
            return Finding(
                "warning",
                "tool calls",
                f"the template emits {emits} but no tool-call parser is set: tool calls would "
                f"arrive as content; use {_choice(found)}",
            )
        alone = parse(probe.turn.text, tool_call=configured, tools=[PROBE_TOOL])
        if answer is None:
            # No realistic whole answer: judge the tool-call parser alone.
            calls = [(c.name, c.arguments) for c in alone.tool_calls]
            content = alone.content or ""
        else:
            calls = [
                (c["function"]["name"], c["function"]["arguments"])
                for c in answer.get("tool_calls") or []
            ]
            content = answer.get("content") or ""
        if _is_probe_call(calls):
            return Finding(
                "ok", "tool calls", f"the template's {emits} reads back through `{configured}`"
            )
        if _is_probe_call(alone.tool_calls) and answer is not None:
            return Finding(
                "error",
                "tool calls",
                f"`{configured}` reads the template's {emits} alone, but in a whole answer the "
                f"reasoning parser `{self.reasoning_parser}` leaves it no call "
                f"(reasoning_content {answer.get('reasoning_content')!r})",
            )
        what = _call_outcome(calls, content, probe.call_markup)
        if not found:
            return Finding(
                "warning",
                "tool calls",
                f"the template emits {emits}; `{configured}` {what}, and no known parser reads "
                "it back",
            )
        return Finding(
            "error",
            "tool calls",
            f"the template emits {emits} but the configured tool-call parser is `{configured}` "
            f"({what}): use {_choice(found)}",
        )

    def _ranked(self, names: list[str]) -> list[str]:
        """The model's own family first (by config.json's model_type), then registry order."""
        family = self.model_type.split("_")[0].rstrip("0123456789")
        return sorted(names, key=lambda n: not (family and n.startswith(family)))

    def answer(self, body: dict[str, Any], output: str) -> dict[str, Any]:
        """The unary message the pipeline answers ``body`` with when the model says ``output``."""
        ids = self.pipeline.tokenize(output) + self.pipeline.eos_token_ids[:1]
        request = {"model": self.pipeline.served_name, "max_tokens": len(ids) + 16} | body
        exchange = self.pipeline.chat(orjson.dumps(request), "shakedown-doctor")
        exchange.feed(orjson.dumps({"token_ids": ids, "finish_reason": None}))
        if not exchange.finished:
            exchange.feed(orjson.dumps({"token_ids": [], "finish_reason": "stop"}))
        message: dict[str, Any] = orjson.loads(exchange.finish())["choices"][0]["message"]
        return message

    def check_markers(self, probe: Probe) -> list[Finding]:
        """Markers are what a model emits, as tokens: one split over several tokens is unusual
        enough to say (the parser still reads it; the model may just never produce it)."""
        markers = [m for m in (*probe.reasoning_markers, probe.call_markup) if m]
        findings = []
        for marker in dict.fromkeys(markers):
            ids = self.pipeline.tokenize(marker)
            if len(ids) != 1:
                findings.append(
                    Finding(
                        "warning",
                        "vocabulary",
                        f"`{marker}` is not one token of the vocabulary ({len(ids)} tokens): "
                        "check the model really emits it",
                    )
                )
        return findings

    def check_kwargs(self, kwargs: Mapping[str, Any]) -> Finding:
        user = [{"role": "user", "content": QUESTION}]
        shown = json.dumps(dict(kwargs))
        try:
            plain = self.render({"messages": user})
            flagged = self.render({"messages": user, "chat_template_kwargs": dict(kwargs)})
        except RequestError as exc:
            return Finding("error", "template kwargs", f"the template fails with {shown}: {exc}")
        if plain == flagged:
            return Finding(
                "error",
                "template kwargs",
                f"the template ignores chat_template_kwargs {shown}: the prompt is the same "
                "with and without them; drop them or use a template that reads them",
            )
        return Finding("ok", "template kwargs", f"chat_template_kwargs {shown} change the prompt")


class Probe:
    """What the template wrote for the probe turn, and the markup around its parts."""

    def __init__(self, turn: Turn, *, folded: bool) -> None:
        self.turn = turn
        text = turn.text
        # Folded reasoning is the pipeline's `<think>` wrapping, not the template's markup.
        self.folded = folded
        self.reasoning = REASONING in text and not folded
        self.call = "get_weather" in text
        self.reasoning_markers = _around(text, REASONING) if self.reasoning else ("", "")
        start, end = self.reasoning_markers
        self.reasoning_markup = f"`{start}`…`{end}`" if start else f"`…{end}`"
        # The call's markup: the first marker after the answer text (or after the reasoning).
        rest = text
        for part in (end, ANSWER):
            if part and part in rest:
                rest = rest[rest.index(part) + len(part) :]
        self.call_markup = _leading_markup(rest) if self.call else ""


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _around(text: str, inner: str) -> tuple[str, str]:
    """The markers right before and after ``inner`` in ``text`` (empty when none)."""
    at = text.find(inner)
    before = text[:at].rstrip()
    after = text[at + len(inner) :].lstrip()
    start = [m for m in _MARKER.finditer(before) if m.end() == len(before)]
    end = _MARKER.match(after)
    return (start[-1].group() if start else "", end.group() if end else "")


def _leading_markup(text: str) -> str:
    found = _MARKER.match(text.lstrip())
    return found.group() if found else ""


def _is_probe_call(calls: Sequence[Any]) -> bool:
    """Exactly the probe's call, from parser ``ToolCall``s or (name, arguments) pairs."""
    pairs = [(c.name, c.arguments) if hasattr(c, "name") else c for c in calls]
    if len(pairs) != 1 or pairs[0][0] != "get_weather":
        return False
    try:
        return bool(json.loads(pairs[0][1]) == CALL_ARGUMENTS)
    except (TypeError, ValueError):
        return False


def _choice(names: list[str]) -> str:
    if len(names) == 1:
        return f"`{names[0]}`"
    rest = ", ".join(names[1:4]) + (", ..." if len(names) > 4 else "")
    return f"`{names[0]}` (or {rest})"


def _call_outcome(calls: Sequence[tuple[str, Any]], content: str, markup: str) -> str:
    if calls:
        name, arguments = calls[0]
        return f"reads it as {name}({arguments})"
    if markup and markup in (content or ""):
        return "reads no call: the markup stays in content"
    return "reads no call and swallows the markup"


# --- entry points ------------------------------------------------------------------------


def diagnose(
    pipeline: Pipeline,
    *,
    reasoning_parser: str | None,
    tool_call_parser: str | None,
    model_dir: str | Path | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """The findings for a worker's pipeline, built with the parsers named here."""
    model_type = ""
    if model_dir is not None:
        try:
            config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
            model_type = str(config.get("model_type") or "")
        except (OSError, ValueError):
            pass
    doctor = Doctor(
        pipeline,
        reasoning_parser=reasoning_parser,
        tool_call_parser=tool_call_parser,
        model_type=model_type,
    )
    return doctor.run(template_kwargs)


def configuration_problem(pipeline: Pipeline, card: Any) -> str | None:
    """Why a worker's parsers do not match its template (its errors, joined), or None."""
    findings = diagnose(
        pipeline,
        reasoning_parser=getattr(card, "reasoning_parser", None),
        tool_call_parser=getattr(card, "tool_call_parser", None),
        model_dir=getattr(card, "model_dir", None),
    )
    errors = [f"{f.topic}: {f.message}" for f in findings if f.level == "error"]
    return "; ".join(errors) or None


def add_doctor_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="check that a model's parsers match its chat template",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_dir", type=Path, help="model directory (tokenizer, template)")
    parser.add_argument("--reasoning-parser", help="the worker's reasoning parser")
    parser.add_argument("--tool-call-parser", help="the worker's tool-call parser")
    parser.add_argument(
        "--chat-template-kwargs",
        type=json.loads,
        help="JSON object the requests pass as chat_template_kwargs, e.g. '{\"enable_thinking\": false}'",
    )
    parser.add_argument("--json", type=Path, help="write the findings here as JSON")
    parser.set_defaults(func=run_doctor)
    return parser


def run_doctor(args: argparse.Namespace, *, out: Any = None) -> int:
    out = out or sys.stdout
    findings: list[Finding] = []
    names: dict[str, str | None] = {}
    for kind, value, table in (
        ("reasoning", args.reasoning_parser, reasoning_parsers()),
        ("tool-call", args.tool_call_parser, tool_call_parsers()),
    ):
        if value and canonical(value, table) is None:
            valid = ", ".join(sorted(table))
            findings.append(
                Finding("error", "parsers", f"unknown {kind} parser {value!r}; valid: {valid}")
            )
            value = None
        names[kind] = value
    kwargs = args.chat_template_kwargs
    if kwargs is not None and not isinstance(kwargs, dict):
        print("shakedown doctor: --chat-template-kwargs must be a JSON object", file=sys.stderr)
        return 2
    try:
        pipeline = Pipeline(
            args.model_dir,
            reasoning_parser=names["reasoning"],
            tool_call_parser=names["tool-call"],
        )
    except (ModelError, OSError) as exc:
        print(f"shakedown doctor: {args.model_dir}: {exc}", file=sys.stderr)
        return 2
    findings += diagnose(
        pipeline,
        reasoning_parser=names["reasoning"],
        tool_call_parser=names["tool-call"],
        model_dir=args.model_dir,
        template_kwargs=kwargs,
    )
    for finding in findings:
        print(finding.line(), file=out)
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    verdict = "MISMATCH" if errors else "OK"
    print(f"{verdict}: {errors} mismatch(es), {warnings} warning(s)", file=out)
    if args.json is not None:
        args.json.write_bytes(
            orjson.dumps(
                {"passed": not errors, "findings": [asdict(f) for f in findings]},
                option=orjson.OPT_INDENT_2,
            )
        )
    return 1 if errors else 0
