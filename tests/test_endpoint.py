"""The loopback endpoint on a real socket: hosting, routes, registry, engines, lifecycle.

Every test runs the real granian server on 127.0.0.1 with the real pipeline on the
packaged tiny model; engines are plain async generators, as workers write them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shakedown._core import Pipeline, error_body
from shakedown.endpoint import (
    EndpointApp,
    EngineRegistry,
    LoopbackServer,
    ModelCard,
    RequestContext,
    attach,
    resolve_port,
)
from shakedown.engines.mocker import Mocker

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


@pytest.fixture
def client(server: LoopbackServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as c:
        yield c


def sse_events(body: bytes) -> list[bytes]:
    assert body.endswith(b"\n\n"), body[-80:]
    return [frame for frame in body.split(b"\n\n") if frame]


def data_of(event: bytes) -> Any:
    assert event.startswith(b"data: "), event
    payload = event[len(b"data: ") :]
    return payload if payload == b"[DONE]" else orjson.loads(payload)


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


# --- hosting ----------------------------------------------------------------------------


def test_refuses_any_address_but_loopback(pipeline: Pipeline, registry: EngineRegistry) -> None:
    app = EndpointApp(pipeline, registry, NAME)
    for host in ("0.0.0.0", "localhost", "::1", "127.0.0.2", "192.168.1.1"):
        with pytest.raises(ValueError, match=r"only binds 127\.0\.0\.1"):
            LoopbackServer(app, host=host)


def test_port_from_argument_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DYN_WORKER_VALIDATION_LOCAL_PORT", raising=False)
    assert resolve_port() == 0
    assert resolve_port(8123) == 8123
    monkeypatch.setenv("DYN_WORKER_VALIDATION_LOCAL_PORT", "9001")
    assert resolve_port() == 9001
    assert resolve_port(0) == 0  # an explicit argument wins
    for bad in ("http", "70000", "-1"):
        monkeypatch.setenv("DYN_WORKER_VALIDATION_LOCAL_PORT", bad)
        with pytest.raises(ValueError, match="DYN_WORKER_VALIDATION_LOCAL_PORT"):
            resolve_port()
    with pytest.raises(ValueError):
        resolve_port(65536)


def test_fixed_port_from_environment(
    pipeline: Pipeline, registry: EngineRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    monkeypatch.setenv("DYN_WORKER_VALIDATION_LOCAL_PORT", str(port))
    with LoopbackServer(EndpointApp(pipeline, registry, NAME)) as srv:
        assert srv.port == port
        assert srv.base_url == f"http://127.0.0.1:{port}/v1"
        assert httpx.get(f"http://127.0.0.1:{port}/live").status_code == 200


def test_port_is_listening_when_start_returns(pipeline: Pipeline, registry: EngineRegistry) -> None:
    srv = LoopbackServer(EndpointApp(pipeline, registry, NAME))
    with pytest.raises(RuntimeError):
        _ = srv.port
    srv.start()
    try:
        # No readiness poll: the first request right after start() must succeed.
        assert httpx.get(f"http://127.0.0.1:{srv.port}/live").status_code == 200
    finally:
        assert srv.stop()


def test_start_stop_rounds_release_threads_and_fds(
    pipeline: Pipeline, registry: EngineRegistry
) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def serve_once() -> None:
        with LoopbackServer(EndpointApp(pipeline, registry, NAME)) as srv:
            assert httpx.get(f"http://127.0.0.1:{srv.port}/live").status_code == 200

    serve_once()  # warm-up: imports and lazily created runtime state
    threads, open_fds = threading.active_count(), fds()
    for _ in range(3):
        serve_once()
    assert threading.active_count() == threads
    assert fds() <= open_fds


def test_listener_sets_tcp_nodelay_on_connections(server: LoopbackServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b"GET /live HTTP/1.1\r\nhost: x\r\n\r\n")
        conn.recv(4096)
        me = conn.getsockname()
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                peer = socket.socket(fileno=os.dup(int(fd)))
            except OSError:
                continue
            with peer:
                try:
                    if peer.type == socket.SOCK_STREAM and peer.getpeername() == me:
                        found.append(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                except OSError:
                    continue
        assert found == [1]


def test_keep_alive_streams_do_not_stall(server: LoopbackServer, registry: EngineRegistry) -> None:
    # Several small writes per response on one reused connection: without TCP_NODELAY
    # each response after the first waits ~40 ms for the client's delayed ACK.
    registry.register(NAME, counting_engine(6, delay=0.001))
    body = orjson.dumps({**CHAT, "stream": True})
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    times = []
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        for _ in range(8):
            start = time.perf_counter()
            conn.sendall(request)
            received = b""
            while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
                chunk = conn.recv(65536)
                assert chunk, "connection closed"
                received += chunk
            times.append(time.perf_counter() - start)
    assert statistics.median(times[1:]) < 0.025, times


# --- routes -----------------------------------------------------------------------------


def test_unknown_route_is_404_like_the_reference(client: httpx.Client) -> None:
    r = client.get("/v1/nonexistent")
    assert r.status_code == 404
    assert (
        r.content
        == b'{"message":"Route not found: GET /v1/nonexistent","type":"Not Found","code":404}'
    )
    assert r.headers["content-type"] == "application/json"
    r = client.post("/v1/embeddings", json={})
    assert r.status_code == 404
    assert orjson.loads(r.content)["message"] == "Route not found: POST /v1/embeddings"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/completions", "POST"),
        ("POST", "/v1/models", "GET"),
        ("DELETE", "/health", "GET"),
        ("POST", "/live", "GET"),
    ],
)
def test_wrong_method_is_405_with_allow_and_no_body(
    client: httpx.Client, method: str, path: str, allow: str
) -> None:
    r = client.request(method, path)
    assert r.status_code == 405
    assert r.headers["allow"] == allow
    assert r.content == b""


def test_live_and_health(client: httpx.Client, registry: EngineRegistry) -> None:
    r = client.get("/live")
    assert (r.status_code, r.content) == (200, b'{"status":"live","message":"Service is live"}')
    assert client.get("/health").content == b'{"status":"healthy","endpoints":[],"instances":[]}'
    registry.register(NAME, counting_engine())
    health = orjson.loads(client.get("/health").content)
    assert health["status"] == "healthy"
    assert health["endpoints"] == [f"dyn://{NAME}"]
    assert health["instances"] == [
        {"component": "backend", "endpoint": "generate", "namespace": "dynamo"}
    ]


def test_unsupported_media_type(client: httpx.Client, registry: EngineRegistry) -> None:
    registry.register(NAME, counting_engine())
    expected = error_body(415, "Expected request with Content-Type application/json")
    for headers in ({}, {"content-type": "text/plain"}):
        r = client.post("/v1/chat/completions", content=orjson.dumps(CHAT), headers=headers)
        assert (r.status_code, r.content) == (415, expected)
    for ok in ("application/json; charset=utf-8", "application/vnd.api+json"):
        r = client.post(
            "/v1/chat/completions", content=orjson.dumps(CHAT), headers={"content-type": ok}
        )
        assert r.status_code == 200, r.content


def test_body_over_the_limit_is_413(
    pipeline: Pipeline, registry: EngineRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYN_HTTP_BODY_LIMIT_MB", "1")
    registry.register(NAME, counting_engine())
    with LoopbackServer(EndpointApp(pipeline, registry, NAME)) as srv:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}
        r = httpx.post(f"http://127.0.0.1:{srv.port}/v1/chat/completions", json=big)
        assert r.status_code == 413
        assert r.content == error_body(
            413, "Request body exceeds the limit of 1 MB set by DYN_HTTP_BODY_LIMIT_MB"
        )


def test_bad_request_comes_from_the_pipeline(
    client: httpx.Client, registry: EngineRegistry, pipeline: Pipeline
) -> None:
    from shakedown._core import RequestError

    registry.register(NAME, counting_engine())
    bad = b'{"model":"tiny","messages":[}'
    with pytest.raises(RequestError) as err:
        pipeline.chat(bad, "x")
    r = client.post(
        "/v1/chat/completions", content=bad, headers={"content-type": "application/json"}
    )
    assert (r.status_code, r.content) == (err.value.status, err.value.body)
    assert r.status_code == 400


# --- registry ---------------------------------------------------------------------------


def test_503_until_registered_and_after_unregister(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    not_ready = error_body(
        503,
        "Model `tiny` is not ready to serve requests yet. The deployment may still be starting "
        "up or is not fully provisioned. Please retry shortly.",
    )
    for stream in (False, True):
        r = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        assert (r.status_code, r.content) == (503, not_ready)
        assert r.headers["content-type"] == "application/json"
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 4})
    assert (r.status_code, r.content) == (503, not_ready)
    assert client.get("/v1/models").content == b'{"object":"list","data":[]}'

    registry.register(NAME, counting_engine())
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]

    assert registry.unregister(NAME)
    assert not registry.unregister(NAME)
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 503
    assert client.get("/v1/models").content == b'{"object":"list","data":[]}'


def test_engine_is_looked_up_per_request(client: httpx.Client, registry: EngineRegistry) -> None:
    seen: list[str] = []

    def engine(tag: str) -> Any:
        async def generate(
            request: dict[str, Any], context: RequestContext
        ) -> AsyncIterator[dict[str, Any]]:
            seen.append(tag)
            async for frame in tokens(2):
                yield frame

        return generate

    registry.register(NAME, engine("a"))
    client.post("/v1/chat/completions", json=CHAT)
    registry.register(NAME, engine("b"))
    client.post("/v1/chat/completions", json=CHAT)
    assert seen == ["a", "b"]


def test_engine_gets_the_pipelines_request_and_a_context(
    client: httpx.Client, registry: EngineRegistry, pipeline: Pipeline
) -> None:
    received: list[tuple[dict[str, Any], str, bool]] = []

    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        received.append((request, context.id, context.is_stopped()))
        async for frame in tokens(1):
            yield frame

    registry.register(NAME, generate)
    request_id = "5ca58340-679f-4bc2-8c34-0350dd5b2254"
    body = orjson.dumps(CHAT)
    r = client.post(
        "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json", "x-dynamo-request-id": request_id},
    )
    assert r.status_code == 200
    assert r.json()["id"] == f"chatcmpl-{request_id}"
    [(request, context_id, stopped)] = received
    assert request == orjson.loads(pipeline.chat(body, request_id).engine_request)
    assert (context_id, stopped) == (request_id, False)


def test_x_request_id_is_echoed(client: httpx.Client, registry: EngineRegistry) -> None:
    registry.register(NAME, counting_engine())
    for stream in (False, True):
        r = client.post(
            "/v1/chat/completions", json={**CHAT, "stream": stream}, headers={"x-request-id": "abc"}
        )
        assert r.headers["x-request-id"] == "abc"


# --- engine errors ----------------------------------------------------------------------


def failing_engine(after: int) -> Any:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        for i in range(after):
            yield {"token_ids": [300 + i]}
        raise RuntimeError("engine blew up")

    return generate


@pytest.mark.parametrize("after", [0, 3])
def test_engine_exception_unary_is_500(
    client: httpx.Client,
    registry: EngineRegistry,
    after: int,
    engine_loop: asyncio.AbstractEventLoop | None,
) -> None:
    registry.register(NAME, failing_engine(after), loop=engine_loop)
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 500
    # Failing before any output, Dynamo 1.6.1 adds the backend status (tests/parity proves it).
    details = b',"details":{"backend_status":500}' if after == 0 else b""
    assert r.content == (
        b'{"message":"Internal server error","type":"Internal Server Error","code":500'
        + details
        + b"}"
    )
    # The host is unharmed: the next request works.
    registry.register(NAME, counting_engine())
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize("after", [0, 3])
def test_engine_exception_in_stream_is_an_error_event(
    client: httpx.Client,
    registry: EngineRegistry,
    after: int,
    engine_loop: asyncio.AbstractEventLoop | None,
) -> None:
    registry.register(NAME, failing_engine(after), loop=engine_loop)
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    events = sse_events(r.content)
    assert events[-2:] == [
        b'data: {"error":{"message":"Internal server error","type":"internal_server_error","code":500}}',
        b"data: [DONE]",
    ]
    chunks = [data_of(e) for e in events[:-2]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert (len(chunks) > 0) == (after > 0)


class Refused(RuntimeError):
    """An engine's own error for a request it finds invalid (`status`, or `code`)."""

    def __init__(self, message: str, **attrs: int) -> None:
        super().__init__(message)
        for name, value in attrs.items():
            setattr(self, name, value)


@pytest.mark.parametrize(
    ("attrs", "status"),
    [({"status": 400}, 400), ({"code": 422}, 422), ({"status": 503}, 500), ({}, 500)],
)
def test_engine_4xx_errors_reach_the_client(
    client: httpx.Client, registry: EngineRegistry, attrs: dict[str, int], status: int
) -> None:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        raise Refused("max_tokens is required", **attrs)
        yield {}

    registry.register(NAME, generate)
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == status
    if status == 500:  # anything else stays hidden behind the generic 500
        assert r.json()["message"] == "Internal server error"
        return
    reason = {400: "Bad Request", 422: "Unprocessable Entity"}[status]
    assert r.json() == {"message": "max_tokens is required", "type": reason, "code": status}
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 200
    assert sse_events(r.content) == [
        b'data: {"error":{"message":"max_tokens is required","type":"invalid_request_error",'
        b'"code":' + str(status).encode() + b"}}",
        b"data: [DONE]",
    ]


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(lambda request, context: [{"token_ids": [1]}], id="not-async-iterator"),
        pytest.param(lambda request, context: 1 / 0, id="raises-on-call"),
    ],
)
def test_broken_engines_are_500(
    client: httpx.Client, registry: EngineRegistry, engine: Any
) -> None:
    registry.register(NAME, engine)
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 500
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert sse_events(r.content)[-1] == b"data: [DONE]"


def test_engine_returning_an_awaitable_iterator(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        return tokens(3)

    registry.register(NAME, generate)
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == 3


def test_unserializable_frame_is_an_engine_error(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        yield {"token_ids": [object()]}

    registry.register(NAME, generate)
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 500


# --- disconnect, stop, concurrency ------------------------------------------------------


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
    start = time.perf_counter()
    assert engine.closed.wait(2), "engine generator was not closed"
    assert time.perf_counter() - start < 0.5
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
    start = time.perf_counter()
    assert srv.stop(timeout=1.0)
    assert time.perf_counter() - start < 1.0
    reader.join(2)
    assert not reader.is_alive()
    assert engine.closed.wait(1)
    events = sse_events(b"".join(received))
    assert events[-1] == b"data: [DONE]"
    error = data_of(events[-2])["error"]
    assert error["message"] == "Service is shutting down"
    assert engine.closed.is_set()
    assert engine.context is not None and engine.context.is_stopped()


def test_stop_is_idempotent_and_refuses_new_connections(
    pipeline: Pipeline, registry: EngineRegistry
) -> None:
    srv = LoopbackServer(EndpointApp(pipeline, registry, NAME))
    srv.start()
    port = srv.port
    assert srv.stop()
    assert srv.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/live")


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


def test_api_key_is_required_when_set(pipeline: Pipeline, registry: EngineRegistry) -> None:
    registry.register(NAME, counting_engine())
    app = EndpointApp(pipeline, registry, NAME, api_key="s3cret")
    with LoopbackServer(app) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        unauthorized = error_body(401, "Invalid or missing bearer token")
        assert orjson.loads(unauthorized) == {
            "message": "Invalid or missing bearer token",
            "type": "Unauthorized",
            "code": 401,
        }
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            for method, path in [
                ("POST", "/v1/chat/completions"),
                ("GET", "/v1/models"),
                ("GET", "/nope"),
            ]:
                r = httpx.request(method, base + path, json=CHAT, headers=headers)
                assert (r.status_code, r.content) == (401, unauthorized)
                assert r.headers["www-authenticate"] == "Bearer"
        good = {"authorization": "Bearer s3cret"}
        assert httpx.post(base + "/v1/chat/completions", json=CHAT, headers=good).status_code == 200
        assert httpx.get(base + "/nope", headers=good).status_code == 404
