"""Streaming reasoning and tool-call parsers for the formats of Dynamo, vLLM and SGLang.

Every parser is a push parser: ``feed(text)`` returns what can be released now,
``finish()`` releases what was held back. The concatenation of a streamed run
equals ``parse()`` of the whole text, for any chunking.

>>> from shakedown.parsers import ChatParser
>>> p = ChatParser(reasoning="deepseek_r1", tool_call="hermes")

Per-request options, as the servers take them from ``chat_template_kwargs``:
``in_reasoning`` (the prompt already opened reasoning; ``force_reasoning=True`` is
SGLang's name for ``in_reasoning=True``), ``thinking`` (the request switched thinking
on or off: off turns reasoning parsing off for the families Dynamo gates, Kimi K2.5,
Nemotron 3, DeepSeek R1/V3/V4 and Gemma 4, and otherwise means output starts outside
reasoning) and ``force_nonempty_content`` (Nemotron 3's switch, which Dynamo reads as
reasoning off).

``dialect="dynamo"`` (the default), ``"vllm"`` or ``"sglang"`` reproduces that server
where they read the same output differently: tool-call ids, values no schema types,
whether a request can switch reasoning parsing off, whitespace-only content before
calls, calls to undeclared tools, whether unmarked output starts inside reasoning
(docs/parsers.md, Dialects). ``tools`` may also be given as JSON text: each distinct
text is read once.

``response_template`` is the checkpoint's response template (its tokenizer config's
``response_template`` object, or its JSON text), which the ``response_template``
families (vLLM's ``hf``) parse with (without one, their text passes through as
content); ``beam`` has Beam's built in.
"""

from shakedown._core import (
    CallDelta,
    ChatParser,
    Delta,
    InvalidToolsError,
    Message,
    ReasoningParser,
    ToolCall,
    ToolCallParser,
    UnknownParserError,
    parse,
)
from shakedown._core import reasoning_parsers as _reasoning_parsers
from shakedown._core import tool_call_parsers as _tool_call_parsers


def reasoning_parsers() -> dict[str, list[str]]:
    """Canonical reasoning parser names, each with the aliases it answers to."""
    return dict(_reasoning_parsers())


def tool_call_parsers() -> dict[str, list[str]]:
    """Canonical tool-call parser names, each with the aliases it answers to."""
    return dict(_tool_call_parsers())


__all__ = [
    "CallDelta",
    "ChatParser",
    "Delta",
    "InvalidToolsError",
    "Message",
    "ReasoningParser",
    "ToolCall",
    "ToolCallParser",
    "UnknownParserError",
    "parse",
    "reasoning_parsers",
    "tool_call_parsers",
]
