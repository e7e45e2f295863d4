"""A request's life: a client that leaves closes the engine's generator, stopping the
server ends open streams well-formed, concurrent requests stay independent."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    data_of,
    sse_events,
)
from shakedown._core import Pipeline
from shakedown.endpoint import (
    EndpointApp,
    EngineRegistry,
    LoopbackServer,
    RequestContext,
)
from shakedown.engines.mocker import Mocker


class Watched:
    """An engine that records when it is closed and what its context said."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = threading.Event()
        self.closed = threading.Event()
        self.context: RequestContext | None = None

    async def generate(
        self, request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        self.context = context
        try:
            for i in range(10_000):
                yield {"token_ids": [300 + i % 500]}
                self.started.set()
                await asyncio.sleep(self.delay)
            yield {"token_ids": [], "finish_reason": "length"}
        finally:
            self.closed.set()


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_closes_the_engine_generator(
    server: LoopbackServer,
    registry: EngineRegistry,
    stream: bool,
    engine_loop: asyncio.AbstractEventLoop | None,
) -> None:
    engine = Watched(delay=0.05)
    registry.register(NAME, engine.generate, loop=engine_loop)
    body = orjson.dumps({**CHAT, "stream": stream})
    conn = socket.create_connection(("127.0.0.1", server.port))
    conn.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert engine.started.wait(5)
    conn.close()
    assert engine.closed.wait(2), "engine generator was not closed"
    assert engine.context is not None and engine.context.is_stopped()
    # The handler unwinds just after the generator closes (across loops, a hop later).
    deadline = time.monotonic() + 1
    while server.app.in_flight and time.monotonic() < deadline:
        time.sleep(0.005)
    assert server.app.in_flight == 0


def test_stop_ends_open_streams_with_error_and_done(
    pipeline: Pipeline, registry: EngineRegistry, engine_loop: asyncio.AbstractEventLoop | None
) -> None:
    engine = Watched(delay=0.2)
    registry.register(NAME, engine.generate, loop=engine_loop)
    srv = LoopbackServer(EndpointApp(pipeline, registry, NAME))
    srv.start()
    received: list[bytes] = []

    def read() -> None:
        with httpx.stream(
            "POST",
            f"http://127.0.0.1:{srv.port}/v1/chat/completions",
            json={**CHAT, "stream": True},
            timeout=10,
        ) as r:
            received.extend(r.iter_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    assert engine.started.wait(5)
    assert srv.stop(timeout=1.0)
    reader.join(2)
    assert not reader.is_alive()
    assert engine.closed.wait(1)
    events = sse_events(b"".join(received))
    assert events[-1] == b"data: [DONE]"
    error = data_of(events[-2])["error"]
    assert error["message"] == "Service is shutting down"
    assert engine.closed.is_set()
    assert engine.context is not None and engine.context.is_stopped()


def test_concurrent_requests_are_independent(
    client: httpx.Client, registry: EngineRegistry, pipeline: Pipeline
) -> None:
    eos = 1
    rows = {
        f"s{i}": [[*pipeline.tokenize(f"<think>r{i}</think>answer {i}"), eos]] for i in range(16)
    }
    registry.register(NAME, Mocker(replay=rows, token_delay=0.002).generate)

    async def one(c: httpx.AsyncClient, i: int) -> tuple[int, str]:
        body = {
            **CHAT,
            "stream": i % 2 == 0,
            "nvext": {"annotations": [f"output_replay_id:s{i}:0"]},
        }
        r = await c.post("/v1/chat/completions", json=body)
        if i % 2:
            return i, r.json()["choices"][0]["message"]["content"]
        content = "".join(
            (data_of(e)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
            for e in sse_events(r.content)[:-1]
        )
        return i, content

    async def all_of() -> list[tuple[int, str]]:
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=10) as c:
            return await asyncio.gather(*(one(c, i) for i in range(16)))

    for i, content in asyncio.run(all_of()):
        assert content == f"answer {i}"
