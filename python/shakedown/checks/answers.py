"""Reading OpenAI answers: JSON bodies, choices, SSE streams folded into one message.

Every helper raises ``CheckFailed`` with a message that says which request went wrong and how.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from .client import Client, Response, Stream
from .results import CheckFailed
from .schema import schema_problem

# The finish reasons the OpenAI chat API defines (plus Dynamo's `cancelled`, never expected).
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


def ok_json(response: Response, what: str) -> dict[str, Any]:
    if response.status != 200:
        raise CheckFailed(f"{what}: HTTP {response.status}: {response.snippet()}")
    try:
        data = response.json()
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: the body is not JSON: {response.snippet()}") from None
    if not isinstance(data, dict):
        raise CheckFailed(f"{what}: the body is not a JSON object: {response.snippet()}")
    return data


def first_choice(data: dict[str, Any], what: str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CheckFailed(f"{what}: no choices in {orjson.dumps(data).decode()[:300]}")
    choice: dict[str, Any] = choices[0]
    return choice


@dataclass
class Answer:
    """One chat choice, from a unary body or folded from a stream."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    # (name, raw arguments: a JSON string if well-formed) in call order
    calls: list[tuple[str, Any]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    message: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def unary_answer(data: dict[str, Any], what: str) -> Answer:
    """The first choice of a ``chat.completion`` body, its shape checked."""
    if data.get("object") != "chat.completion":
        raise CheckFailed(f"{what}: object is {data.get('object')!r}, not 'chat.completion'")
    choice = first_choice(data, what)
    message = choice.get("message")
    if not isinstance(message, dict) or message.get("role") != "assistant":
        raise CheckFailed(f"{what}: no assistant message in {orjson.dumps(choice).decode()[:300]}")
    answer = Answer(
        content=_text(message.get("content"), f"{what}: content"),
        reasoning=_text(message.get("reasoning_content"), f"{what}: reasoning_content"),
        finish_reason=choice.get("finish_reason"),
        usage=data.get("usage") if isinstance(data.get("usage"), dict) else None,
        message=message,
    )
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type") != "function":
            raise CheckFailed(f"{what}: malformed tool call {orjson.dumps(call).decode()[:200]}")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise CheckFailed(f"{what}: a tool call has no id")
        answer.calls.append((str(function.get("name")), function.get("arguments")))
        answer.call_ids.append(call["id"])
    _check_finish(answer.finish_reason, what)
    return answer


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CheckFailed(f"{what} is {type(value).__name__}, not a string")
    return value


def _check_finish(reason: object, what: str) -> None:
    if reason not in FINISH_REASONS:
        raise CheckFailed(f"{what}: finish_reason {reason!r} is not an OpenAI finish reason")


def stream_chunks(stream: Stream, what: str, obj: str) -> list[dict[str, Any]]:
    """The chunks of a well-framed SSE stream: 200, text/event-stream, JSON events,
    ``data: [DONE]`` last, one id and the right ``object`` on every chunk."""
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


def stream_answer(stream: Stream, what: str) -> Answer:
    """Choice 0 of a chat stream, its deltas concatenated (tool calls by index)."""
    chunks = stream_chunks(stream, what, "chat.completion.chunk")
    content: list[str] = []
    reasoning: list[str] = []
    finish: list[str] = []
    calls: dict[int, list[str]] = {}
    ids: dict[int, str] = {}
    usage = None
    for chunk in chunks:
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                index = call.get("index")
                if not isinstance(index, int):
                    raise CheckFailed(f"{what}: a tool-call delta has no index")
                slot = calls.setdefault(index, ["", ""])
                if isinstance(call.get("id"), str) and call["id"]:
                    ids.setdefault(index, call["id"])
                function = call.get("function") or {}
                slot[0] += function.get("name") or ""
                slot[1] += function.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finish.append(choice["finish_reason"])
    if len(finish) != 1:
        raise CheckFailed(f"{what}: {len(finish)} chunks carry a finish_reason (want exactly 1)")
    _check_finish(finish[0], what)
    for index in calls:
        if index not in ids:
            raise CheckFailed(f"{what}: tool call {index} was streamed without an id")
    return Answer(
        content="".join(content),
        reasoning="".join(reasoning),
        finish_reason=finish[0],
        calls=[(calls[i][0], calls[i][1]) for i in sorted(calls)],
        call_ids=[ids[i] for i in sorted(calls)],
        usage=usage,
    )


def call_arguments(raw: object, schema: object, what: str) -> dict[str, Any]:
    """A call's arguments: a JSON string holding an object valid against ``schema``."""
    if not isinstance(raw, str):
        raise CheckFailed(f"{what}: arguments are not a JSON string: {raw!r}")
    try:
        arguments = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: arguments are not valid JSON: {raw[:200]!r}") from None
    if not isinstance(arguments, dict):
        raise CheckFailed(f"{what}: arguments are not a JSON object: {raw[:200]!r}")
    problem = schema_problem(arguments, schema)
    if problem:
        raise CheckFailed(f"{what}: arguments {raw[:200]!r} do not match the schema: {problem}")
    return arguments


def tool_schemas(tools: object) -> dict[str, object]:
    """Function name -> parameters schema, from a request's ``tools``."""
    schemas: dict[str, object] = {}
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas[function["name"]] = function.get("parameters") or {}
    return schemas


def checked_calls(answer: Answer, tools: object, what: str) -> list[dict[str, Any]]:
    """Every call names a requested tool and carries schema-valid arguments."""
    schemas = tool_schemas(tools)
    parsed = []
    for name, raw in answer.calls:
        if name not in schemas:
            raise CheckFailed(f"{what}: called {name!r}, which is not among the tools")
        parsed.append(call_arguments(raw, schemas[name], f"{what}: {name}"))
    return parsed


def chat_answer(client: Client, body: dict[str, Any], stream: bool, what: str) -> Answer:
    """Ask ``/chat/completions`` once, unary or streamed, and read the answer."""
    if stream:
        return stream_answer(client.stream("/chat/completions", body | {"stream": True}), what)
    return unary_answer(ok_json(client.post("/chat/completions", body), what), what)
