"""The engine registry and what engines do wrong: 503 until registered, per-request lookup,
the engine's request and context, engine exceptions and error frames as the reference
answers them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    counting_engine,
    data_of,
    sse_events,
    tokens,
)
from shakedown._core import Pipeline, error_body
from shakedown.endpoint import (
    EngineRegistry,
    RequestContext,
)

INTERNAL = b'{"message":"Internal server error","type":"Internal Server Error","code":500}'
STREAM_INTERNAL = [
    b'data: {"error":{"message":"Internal server error","type":"internal_server_error","code":500}}',
    b"data: [DONE]",
]


def assert_internal_error(r: httpx.Response, stream: bool) -> None:
    """The reference's generic 500: in the stream (a 200, an error event, [DONE]) or the body."""
    if stream:
        assert r.status_code == 200
        assert sse_events(r.content)[-2:] == STREAM_INTERNAL
    else:
        assert (r.status_code, r.content) == (500, INTERNAL)
        assert r.headers["content-type"] == "application/json"


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


OUTPUTS = [{"token_ids": [300 + i]} for i in range(4)] + [
    {"token_ids": [], "finish_reason": "length"}
]


def answer(r: httpx.Response) -> Any:
    """What a response says, its ids and timestamps aside."""
    if r.headers["content-type"] == "text/event-stream":
        chunks = [data_of(e) for e in sse_events(r.content)[:-1]]
        return [(c["choices"], c.get("usage")) for c in chunks]
    return r.json()["choices"], r.json()["usage"]


@pytest.mark.parametrize("form", ["list", "json", "json-array"])
@pytest.mark.parametrize("stream", [False, True])
def test_outputs_may_come_in_lists_or_serialized(
    client: httpx.Client,
    registry: EngineRegistry,
    engine_loop: asyncio.AbstractEventLoop | None,
    form: str,
    stream: bool,
) -> None:
    # The same outputs as dicts one by one, as a list, as JSON bytes each, as JSON arrays.
    items: list[Any] = {
        "list": [OUTPUTS[:2], OUTPUTS[2:]],
        "json": [orjson.dumps(output) for output in OUTPUTS],
        "json-array": [orjson.dumps(OUTPUTS[:3]), orjson.dumps(OUTPUTS[3:])],
    }[form]

    def engine(items: list[Any]) -> Any:
        async def generate(request: dict[str, Any], context: RequestContext) -> AsyncIterator[Any]:
            for item in items:
                yield item

        return generate

    answers = []
    for served in (OUTPUTS, items):
        registry.register(NAME, engine(served), loop=engine_loop)
        r = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        assert r.status_code == 200
        answers.append(answer(r))
    assert answers[0] == answers[1]
    assert answers[0]  # not empty: the outputs reached the client


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
@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_exception_is_the_references_error(
    client: httpx.Client,
    registry: EngineRegistry,
    after: int,
    stream: bool,
    engine_loop: asyncio.AbstractEventLoop | None,
) -> None:
    registry.register(NAME, failing_engine(after), loop=engine_loop)
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    if stream:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        events = sse_events(r.content)
        assert events[-2:] == STREAM_INTERNAL
        chunks = [data_of(e) for e in events[:-2]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert (len(chunks) > 0) == (after > 0)
    else:
        # Failing before any output, Dynamo 1.6.1 adds the backend status (tests/parity
        # proves it).
        details = b',"details":{"backend_status":500}' if after == 0 else b""
        assert (r.status_code, r.content) == (500, INTERNAL[:-1] + details + b"}")
    # The host is unharmed: the next request works.
    registry.register(NAME, counting_engine())
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


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


def frames_then(last: dict[str, Any]) -> Any:
    """An engine that sends two tokens, then `last`."""

    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        yield {"token_ids": [300]}
        yield {"token_ids": [301]}
        yield last

    return generate


@pytest.mark.parametrize(
    "last",
    [
        pytest.param({"event": "error", "comment": ["engine out of memory"]}, id="error-event"),
        pytest.param({"token_ids": [], "finish_reason": {"error": "oom"}}, id="finish-error"),
        pytest.param({"token_ids": "not ids"}, id="malformed"),
        pytest.param({"token_ids": [], "finish_reason": "maybe"}, id="unknown-finish"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_frame_gets_the_reference_error_and_is_logged(
    client: httpx.Client,
    registry: EngineRegistry,
    caplog: pytest.LogCaptureFixture,
    engine_loop: asyncio.AbstractEventLoop | None,
    last: dict[str, Any],
    stream: bool,
) -> None:
    registry.register(NAME, frames_then(last), loop=engine_loop)
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert_internal_error(r, stream)  # unary, before: the right status with an empty body
    [record] = [r for r in caplog.records if r.name == "shakedown.endpoint"]
    assert record.levelname == "WARNING"
    assert orjson.dumps(last).decode() in record.getMessage()


def test_an_engine_error_frame_with_a_4xx_reaches_a_unary_client(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    refused = {"message": "max_tokens is required", "code": 400}
    registry.register(
        NAME, frames_then({"event": "error", "comment": [orjson.dumps(refused).decode()]})
    )
    r = client.post("/v1/chat/completions", json=CHAT)
    assert (r.status_code, r.content) == (400, error_body(400, "max_tokens is required"))


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_raising_keyboard_interrupt_or_system_exit_fails_only_its_request(
    client: httpx.Client,
    registry: EngineRegistry,
    caplog: pytest.LogCaptureFixture,
    engine_loop: asyncio.AbstractEventLoop | None,
    raised: type[BaseException],
    stream: bool,
) -> None:
    async def generate(
        request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        yield {"token_ids": [300]}
        raise raised()

    registry.register(NAME, generate, loop=engine_loop)
    r = client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert_internal_error(r, stream)
    assert f"the engine raised {raised.__name__}" in caplog.text
    # Neither the endpoint's loop nor the worker's was stopped: both still serve.
    registry.register(NAME, counting_engine(), loop=engine_loop)
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
    if engine_loop is not None:
        assert engine_loop.is_running()
