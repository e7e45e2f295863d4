"""The official `openai` SDK against the endpoint on loopback: the packaged tiny model
through the scripted mocker, exactly what `shakedown serve` runs by default."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from shakedown.cli import TINY_MODEL, make_mocker
from shakedown.endpoint import EngineRegistry, LocalEndpoint, build_pipeline
from validation_helpers import tiny_card

REASONING = "The user wants the weather in Paris, so I will call the get_weather tool."
CONTENT = "Let me check that for you."
MESSAGES: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TEXT_TURN = {"nvext": {"annotations": ["output_replay_id:text:0"]}}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalEndpoint]:
    card = tiny_card("tiny")
    pipeline = build_pipeline(card)
    registry = EngineRegistry()
    registry.register(card.endpoint, make_mocker(pipeline, TINY_MODEL).generate)
    with LocalEndpoint(card, pipeline, registry) as ep:
        yield ep


@pytest.fixture
def client(endpoint: LocalEndpoint) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0) as c:
        yield c


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_unary_reasoning_content_and_tool_call(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=64)
    assert r.id.startswith("chatcmpl-")
    [choice] = r.choices
    assert choice.finish_reason == "tool_calls"
    message = choice.message
    assert message.model_extra is not None
    assert message.model_extra["reasoning_content"] == REASONING
    assert message.content == CONTENT
    assert message.tool_calls is not None
    [call] = message.tool_calls
    assert call.id.startswith("call-")
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert r.usage is not None and r.usage.completion_tokens > 0


def test_streaming_reasoning_content_and_tool_call(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, content, calls, finish, usage = "", "", [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
            calls.extend(delta.tool_calls or [])
            finish = choice.finish_reason or finish
    assert reasoning == REASONING
    assert content == CONTENT
    [call] = calls
    assert call.function is not None and call.function.name == "get_weather"
    assert json.loads(call.function.arguments or "") == {"city": "Paris"}
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens > 0


def test_async_unary_and_streaming_text(endpoint: LocalEndpoint) -> None:
    async def go() -> tuple[Any, str, str]:
        async with openai.AsyncOpenAI(
            base_url=endpoint.base_url, api_key="unused", max_retries=0
        ) as c:
            unary = await c.chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=32, extra_body=TEXT_TURN
            )
            stream = await c.chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=32, stream=True, extra_body=TEXT_TURN
            )
            reasoning, content = "", ""
            async for chunk in stream:
                for choice in chunk.choices:
                    reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
                    content += choice.delta.content or ""
            return unary, reasoning, content

    unary, reasoning, content = asyncio.run(go())
    message = unary.choices[0].message
    assert message.content == content == "Hello there! How can I help you today?"
    assert message.model_extra["reasoning_content"] == reasoning == "The user greets me."
    assert unary.choices[0].finish_reason == "stop"
    assert message.tool_calls is None


def test_async_concurrent_streams(endpoint: LocalEndpoint) -> None:
    async def one(c: openai.AsyncOpenAI, text: bool) -> str:
        extra = TEXT_TURN if text else None
        stream = await c.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            tools=TOOLS,
            stream=True,
            max_tokens=64,
            extra_body=extra,
        )
        finish = ""
        async for chunk in stream:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
        return finish

    async def go() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=endpoint.base_url, api_key="unused", max_retries=0
        ) as c:
            return await asyncio.gather(*(one(c, i % 2 == 0) for i in range(12)))

    assert asyncio.run(go()) == ["stop", "tool_calls"] * 6


def test_completions_have_no_reasoning_parsing(client: openai.OpenAI) -> None:
    r = client.completions.create(model="tiny", prompt="Hi", max_tokens=64, extra_body=TEXT_TURN)
    assert (
        r.choices[0].text
        == "<think>The user greets me.</think>Hello there! How can I help you today?"
    )
    pieces = client.completions.create(
        model="tiny", prompt="Hi", max_tokens=64, stream=True, extra_body=TEXT_TURN
    )
    assert "".join(c.choices[0].text for c in pieces if c.choices) == r.choices[0].text


def test_bad_requests_are_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=[], max_tokens=4)
    assert err.value.status_code == 400
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=0)


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=MESSAGES, max_tokens=4)


def test_503_before_an_engine_is_registered() -> None:
    card = tiny_card("tiny")
    with LocalEndpoint(card, build_pipeline(card), EngineRegistry()) as ep:
        c = openai.OpenAI(base_url=ep.base_url, api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as err:
            c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)
        assert err.value.status_code == 503
        assert "is not ready to serve requests yet" in str(err.value)
