"""shakedown's parsers inside vLLM, as a tool-parser and reasoning-parser plugin.

    vllm serve MODEL --enable-auto-tool-choice \\
        --tool-parser-plugin shakedown.integrations.vllm --tool-call-parser hermes \\
        --reasoning-parser-plugin shakedown.integrations.vllm --reasoning-parser qwen3

Importing this module (which is what vLLM does with a plugin) registers, under every tool-call
and reasoning parser name vLLM registers that shakedown also answers to, a parser that runs
shakedown's in vLLM's dialect; names shakedown does not know stay vLLM's. Only vLLM's process
imports it: it needs vLLM, and shakedown's own import never loads it.

vLLM builds one parser per request and drives it through its `Parser`: whole outputs through
`extract_tool_calls` / `extract_reasoning`, streams delta by delta. These parsers read only
`delta_text` and say so with `engine_based_streaming`, which also makes vLLM call
`finish_streaming()` at the end (and, for reasoning, when it hands over to the tool phase), so
text held back at a possible marker is released instead of lost. vLLM composes the two
parsers apart; when both are shakedown's, the reasoning parser is told the tool-call family so
that a call ends reasoning as it does in shakedown's own ChatParser.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shakedown.parsers import (
    Delta,
    ReasoningParser,
    ToolCallParser,
    parse,
    reasoning_parsers,
    tool_call_parsers,
)

_tool_parsers = importlib.import_module("vllm.tool_parsers")
_reasoning = importlib.import_module("vllm.reasoning")
_protocol = importlib.import_module("vllm.entrypoints.generate.base.protocol")
_ToolParserBase: Any = _tool_parsers.ToolParser
_ReasoningParserBase: Any = _reasoning.ReasoningParser

DIALECT = "vllm"


def _dialect() -> dict[str, Any]:
    """`dialect=` where this build of shakedown has dialects (they came with issue 13)."""
    options: dict[str, Any] = {"dialect": DIALECT}
    try:
        ToolCallParser("hermes", **options)
    except TypeError:
        return {}
    return options


_DIALECT = _dialect()


# The last tool list converted, with its JSON: vLLM builds a request's parsers more than once
# from the same list. The entry holds the list itself (so its id is not reused), compared by
# identity.
_last_tools: tuple[Any, str | None] = (None, None)


def _tools_json(tools: Sequence[Any] | None) -> str | None:
    """The request's tools as the JSON text shakedown's parsers take. shakedown reads each
    distinct text once and keeps it (keyed by the text itself), so a server whose requests
    declare the same tools pays for reading their schemas once; here each list is written
    once."""
    global _last_tools
    if not tools:
        return None
    held, text = _last_tools
    if held is tools:
        return text
    text = json.dumps([_tool_dict(t) for t in tools])
    _last_tools = (tools, text)
    return text


# The families that parse with a checkpoint's response template, and the last template
# written as JSON (held, so its id is not reused): one tokenizer serves every request.
_last_template: tuple[Any, str] = (None, "")


def _response_template(tokenizer: Any, family: str) -> dict[str, Any]:
    """`response_template=` for the `response_template` family (vLLM's `hf`): the
    checkpoint's template, found where vLLM's own parser looks (the tokenizer's attribute,
    else its init kwargs). None found: no option."""
    global _last_template
    if family != "response_template" or tokenizer is None:
        return {}
    template = getattr(tokenizer, "response_template", None)
    if not isinstance(template, dict):
        template = (getattr(tokenizer, "init_kwargs", None) or {}).get("response_template")
    if not isinstance(template, dict):
        return {}
    held, text = _last_template
    if held is not template:
        text = json.dumps(template)
        _last_template = (template, text)
    return {"response_template": text}


def _tool_dict(tool: Any) -> dict[str, Any]:
    """One tool as a plain dict. vLLM's tool model is read field by field: its pydantic
    serializer costs more than the whole parse of a short reply."""
    function = getattr(tool, "function", None)
    if function is None or not hasattr(function, "name"):
        return tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
    fields = {
        "name": function.name,
        "description": getattr(function, "description", None),
        "parameters": getattr(function, "parameters", None),
    }
    return {
        "type": getattr(tool, "type", "function"),
        "function": {k: v for k, v in fields.items() if v is not None},
    }


def _delta_message(delta: Delta) -> Any:
    """vLLM's DeltaMessage for a shakedown Delta, or None when there is nothing to send."""
    if not delta:
        return None
    calls = [
        _protocol.DeltaToolCall(
            index=call.index,
            id=call.id,
            type="function" if call.id is not None else None,
            function=_protocol.DeltaFunctionCall(name=call.name, arguments=call.arguments),
        )
        for call in delta.calls
    ]
    return _protocol.DeltaMessage(
        content=delta.content, reasoning=delta.reasoning_content, tool_calls=calls
    )


class ShakedownToolParser(_ToolParserBase):  # type: ignore[misc]
    """vLLM's ToolParser interface over one shakedown tool-call family (set by subclasses)."""

    family = ""
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self._declared = tools
        self._tools = _tools_json(tools)
        self._template = _response_template(tokenizer, self.family)
        self._stream: ToolCallParser | None = None

    def _request_tools(self, request: Any) -> str | None:
        """The request's tools as JSON; vLLM hands the constructor the request's own list,
        converted once there."""
        tools = getattr(request, "tools", None)
        if not tools or tools is self._declared:
            return self._tools
        return _tools_json(tools)

    def extract_tool_calls(self, model_output: str, request: Any) -> Any:
        tools = self._request_tools(request)
        message = parse(
            model_output, tool_call=self.family, tools=tools, **_DIALECT, **self._template
        )
        calls = [
            _protocol.ToolCall(
                id=call.id,
                function=_protocol.FunctionCall(name=call.name, arguments=call.arguments),
            )
            for call in message.tool_calls
        ]
        return _protocol.ExtractedToolCallInformation(
            tools_called=bool(calls), tool_calls=calls, content=message.content or None
        )

    def _parser(self, request: Any) -> ToolCallParser:
        if self._stream is None:
            tools = self._request_tools(request)
            self._stream = ToolCallParser(self.family, tools=tools, **_DIALECT, **self._template)
        return self._stream

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> Any:
        return _delta_message(self._parser(request).feed(delta_text))

    def finish_streaming(self) -> Any:
        if self._stream is None:
            return None
        return _delta_message(self._stream.finish())


class ShakedownReasoningParser(_ReasoningParserBase):  # type: ignore[misc]
    """vLLM's ReasoningParser interface over one shakedown reasoning family (set by subclasses).

    Reasoning has ended, for vLLM, once the parser has released content. Token-level questions
    (`is_reasoning_end`, `extract_content_ids`) are answered by running the parser over the
    decoded tokens."""

    family = ""
    # The shakedown tool-call family vLLM pairs this parser with, whose calls end reasoning
    # as they do in shakedown's ChatParser (set by `_paired`).
    tool_call: str | None = None
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._in_reasoning: bool | None = None
        self._stream: ReasoningParser | None = None
        self._ended = False
        self._template = _response_template(tokenizer, self.family)

    def _new(self, in_reasoning: bool | None = None, inherit: bool = True) -> ReasoningParser:
        start = self._in_reasoning if inherit else in_reasoning
        if self.tool_call is None:
            return ReasoningParser(self.family, in_reasoning=start, **_DIALECT, **self._template)
        return ReasoningParser(
            self.family,
            in_reasoning=start,
            tool_call=self.tool_call,
            **_DIALECT,
            **self._template,
        )

    def _first_content_token(self, token_ids: Sequence[int]) -> int | None:
        """Index of the token whose text first comes out as content (None: still reasoning)."""
        parser = self._new()
        decode: Callable[..., str] = self.model_tokenizer.decode
        text = ""
        for i in range(len(token_ids)):
            whole = decode(list(token_ids[: i + 1]))
            if parser.feed(whole[len(text) :]).content:
                return i
            text = whole
        return None

    def _probe_is_content(self, text: str, in_reasoning: bool | None) -> bool:
        """Whether text fed after `text` comes out as content."""
        parser = self._new(in_reasoning, inherit=False)
        parser.feed(text)
        probe = parser.feed("\x00").content or ""
        return "\x00" in probe + (parser.finish().content or "")

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        # These tokens close reasoning if a parser inside reasoning comes out of it after
        # them; a family that never splits reasoning off (minimax_append_think) never does.
        text = self.model_tokenizer.decode(list(input_ids))
        return not self._probe_is_content("", True) and self._probe_is_content(text, True)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        # A prompt that leaves reasoning open (a template that writes `<think>`) puts the
        # output inside it.
        text = self.model_tokenizer.decode(list(prompt_token_ids))
        if not self._probe_is_content(text, None):
            self._in_reasoning = True

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        first = self._first_content_token(input_ids)
        return [] if first is None else list(input_ids[first:])

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        first = self._first_content_token(token_ids)
        return len(token_ids) if first is None else first

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        parser = self._new()
        head, tail = parser.feed(model_output), parser.finish()
        reasoning = (head.reasoning_content or "") + (tail.reasoning_content or "")
        content = (head.content or "") + (tail.content or "")
        return reasoning or None, content or None

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> Any:
        if self._stream is None:
            self._stream = self._new()
        delta = self._stream.feed(delta_text)
        if delta.content:
            self._ended = True
        return _delta_message(delta)

    def has_engine_confirmed_reasoning_end(self) -> bool:
        return self._ended

    def finish_streaming(self) -> Any:
        if self._stream is None:
            return None
        delta, self._stream = self._stream.finish(), None
        return _delta_message(delta)


# vLLM parses a gpt-oss checkpoint's output with its own HarmonyParser, which refuses any
# parser classes but its own gpt-oss ones: taking their names over would break gpt-oss serving.
# vLLM's `beam` is one parser for the whole message; as a reasoning + tool pair, vLLM's
# hand-over would pass the final answer's closer (`<|return|>`) to the tool side as content.
_LEFT_TO_VLLM = {"harmony", "gpt_oss", "beam"}


def _known(names: Iterable[str], registry: Callable[[], dict[str, list[str]]]) -> dict[str, str]:
    """vLLM's names that shakedown answers to (and may take over), each with shakedown's
    canonical family."""
    aliases = {
        alias.lower(): family
        for family, names_ in registry().items()
        if family not in _LEFT_TO_VLLM
        for alias in [family, *names_]
    }
    return {name: aliases[name.lower()] for name in names if name.lower() in aliases}


def _register() -> None:
    tool_manager = _tool_parsers.ToolParserManager
    for name, family in _known(tool_manager.list_registered(), tool_call_parsers).items():
        cls = type(f"Shakedown_{family}_ToolParser", (ShakedownToolParser,), {"family": family})
        tool_manager.register_module(name=name, module=cls)
    reasoning_manager = _reasoning.ReasoningParserManager
    for name, family in _known(reasoning_manager.list_registered(), reasoning_parsers).items():
        cls = type(
            f"Shakedown_{family}_ReasoningParser", (ShakedownReasoningParser,), {"family": family}
        )
        reasoning_manager.register_module(name=name, module=cls)


def _paired(compose: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM composes a reasoning and a tool parser apart; when both are shakedown's, the
    reasoning parser learns the tool-call family so that a call ends reasoning, as in
    shakedown's own ChatParser (and in vLLM's own Qwen3 and GLM parsers)."""

    def composed(cls: Any, *args: Any, **kwargs: Any) -> Any:
        parser_cls = compose(*args, **kwargs)
        reasoning_cls = getattr(parser_cls, "reasoning_parser_cls", None)
        tool_cls = getattr(parser_cls, "tool_parser_cls", None)
        if not (
            isinstance(reasoning_cls, type)
            and issubclass(reasoning_cls, ShakedownReasoningParser)
            and isinstance(tool_cls, type)
            and issubclass(tool_cls, ShakedownToolParser)
        ):
            return parser_cls
        paired = type(reasoning_cls.__name__, (reasoning_cls,), {"tool_call": tool_cls.family})
        return type(parser_cls.__name__, (parser_cls,), {"reasoning_parser_cls": paired})

    return composed


def _pair_parsers() -> None:
    manager = importlib.import_module("vllm.parser.parser_manager").ParserManager
    if not getattr(manager, "_shakedown_paired", False):
        manager._compose_parser = classmethod(_paired(manager._compose_parser))
        manager._shakedown_paired = True


def registered() -> tuple[dict[str, str], dict[str, str]]:
    """The (tool-call, reasoning) names this plugin took over, each with shakedown's family."""
    return (
        _known(_tool_parsers.ToolParserManager.list_registered(), tool_call_parsers),
        _known(_reasoning.ReasoningParserManager.list_registered(), reasoning_parsers),
    )


_register()
_pair_parsers()

__all__ = ["ShakedownReasoningParser", "ShakedownToolParser", "registered"]
