"""Shared by the `test_endpoint_*` modules: the real granian server on 127.0.0.1 with the real
pipeline on the packaged tiny model, and engines written as workers write them (plain async
generators). Modules import the fixtures they use by name."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shakedown._core import Pipeline
from shakedown.endpoint import EndpointApp, EngineRegistry, LoopbackServer, RequestContext

TINY = Path(__file__).resolve().parent.parent / "python" / "shakedown" / "models" / "tiny"
NAME = "dynamo.backend.generate"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return Pipeline(
        str(TINY), served_name="tiny", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
    )


@pytest.fixture
def registry() -> EngineRegistry:
    return EngineRegistry()


@pytest.fixture
def server(pipeline: Pipeline, registry: EngineRegistry) -> Iterator[LoopbackServer]:
    srv = LoopbackServer(EndpointApp(pipeline, registry, NAME))
    srv.start()
    yield srv
    assert srv.stop(), "server thread did not end within a second"


@pytest.fixture
def client(server: LoopbackServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as c:
        yield c


@pytest.fixture(params=["endpoint-loop", "worker-loop"])
def engine_loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop | None]:
    """Where registered engines run: on the endpoint's loop, or on a worker's own loop
    in another thread (registered with `loop=`), as Python workers' engines do."""
    if request.param == "endpoint-loop":
        yield None
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def sse_events(body: bytes) -> list[bytes]:
    assert body.endswith(b"\n\n"), body[-80:]
    return [frame for frame in body.split(b"\n\n") if frame]


def data_of(event: bytes) -> Any:
    assert event.startswith(b"data: "), event
    payload = event[len(b"data: ") :]
    return payload if payload == b"[DONE]" else orjson.loads(payload)


def post_request(body: bytes, path: str = "/v1/chat/completions", headers: bytes = b"") -> bytes:
    """A raw HTTP/1.1 POST of a JSON body, for tests that hold the socket themselves."""
    return (
        b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n%s\r\n%s" % (path.encode(), len(body), headers, body)
    )


async def tokens(n: int, delay: float = 0.0) -> AsyncIterator[dict[str, Any]]:
    for i in range(n):
        if delay:
            await asyncio.sleep(delay)
        yield {"token_ids": [300 + i]}
    yield {"token_ids": [], "finish_reason": "length"}


def counting_engine(n: int = 5, delay: float = 0.0) -> Any:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        async for frame in tokens(n, delay):
            yield frame

    return generate


def wait_until(condition: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what or condition}")
        time.sleep(0.01)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end has closed `sock` (a non-blocking peek)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
