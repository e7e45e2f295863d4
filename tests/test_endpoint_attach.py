"""Attaching the endpoint to a worker: card selection, and engines that live on the
worker's own event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    TINY,
    counting_engine,
    sse_events,
)
from shakedown.endpoint import (
    EngineRegistry,
    LoopbackServer,
    ModelCard,
    RequestContext,
    attach,
)
from shakedown.engines.mocker import Mocker


def test_attach_serves_the_first_eligible_card(
    registry: EngineRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    cards = [
        ModelCard(str(TINY), served_name="adapter", lora="my-lora"),
        ModelCard(str(TINY), served_name="prefill", worker_type="prefill"),
        ModelCard(
            str(TINY), served_name="tiny", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
        ),
    ]
    endpoint = attach(cards, registry)
    assert endpoint is not None
    try:
        assert endpoint.model == "tiny"
        assert endpoint.base_url == f"http://127.0.0.1:{endpoint.port}/v1"
        registry.register(cards[2].endpoint, Mocker(default=[300, 301, 1]).generate)
        r = httpx.post(f"{endpoint.base_url}/chat/completions", json=CHAT)
        assert r.status_code == 200
    finally:
        assert endpoint.stop()
    assert "adapter" in caplog.text and "LoRA" in caplog.text
    assert "prefill-only" in caplog.text


def test_attach_with_no_eligible_card_opens_nothing(
    registry: EngineRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    assert attach(ModelCard(str(TINY), model_input="text"), registry) is None
    assert "input is text, not tokens" in caplog.text


def test_engine_runs_on_the_workers_loop(server: LoopbackServer, registry: EngineRegistry) -> None:
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"

    async def worker() -> tuple[list[bool], httpx.Response, httpx.Response]:
        loop = asyncio.get_running_loop()
        handoff: asyncio.Queue[int] = asyncio.Queue()  # bound to this loop on first use
        ran_here: list[bool] = []

        async def generate(
            request: dict[str, Any], context: RequestContext
        ) -> AsyncIterator[dict[str, Any]]:
            ran_here.append(asyncio.get_running_loop() is loop)
            for i in range(3):
                await handoff.put(300 + i)
                yield {"token_ids": [await handoff.get()]}
            yield {"token_ids": [], "finish_reason": "length"}

        registry.register(NAME, generate, loop=loop)
        unary = await asyncio.to_thread(httpx.post, url, json=CHAT)
        streamed = await asyncio.to_thread(httpx.post, url, json={**CHAT, "stream": True})
        return ran_here, unary, streamed

    ran_here, unary, streamed = asyncio.run(worker())
    assert ran_here == [True, True]
    assert unary.status_code == 200
    assert unary.json()["usage"]["completion_tokens"] == 3
    assert sse_events(streamed.content)[-1] == b"data: [DONE]"


def test_engine_whose_loop_has_stopped_is_an_engine_error(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    loop = asyncio.new_event_loop()
    registry.register(NAME, counting_engine(), loop=loop)
    try:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 500
    finally:
        loop.close()
