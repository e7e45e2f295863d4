"""Routes and request checks: 404/405, /live and /health, content type, body limit and
timeout, bad requests, the bearer token."""

from __future__ import annotations

import logging
import socket

import httpx
import orjson
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    counting_engine,
    post_request,
    wait_until,
)
from shakedown._core import Pipeline, error_body
from shakedown.endpoint import (
    EndpointApp,
    EngineRegistry,
    LoopbackServer,
)


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


def test_the_body_must_arrive_within_the_body_timeout(
    pipeline: Pipeline, registry: EngineRegistry
) -> None:
    registry.register(NAME, counting_engine())
    app = EndpointApp(pipeline, registry, NAME, body_read_timeout=0.2)
    with LoopbackServer(app) as srv, socket.create_connection(("127.0.0.1", srv.port)) as conn:
        body = orjson.dumps(CHAT)
        conn.sendall(post_request(body)[: -len(body) // 2])  # half the body, then nothing
        conn.settimeout(5)
        response = b""
        while chunk := conn.recv(65536):  # the server answers, then closes
            response += chunk
    head, _, content = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert b"connection: close" in head.lower()
    assert content == error_body(408, "Request body not received within 0.2 s")


def test_a_client_leaving_mid_upload_is_one_log_line(
    server: LoopbackServer, registry: EngineRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    registry.register(NAME, counting_engine())
    body = orjson.dumps(CHAT)
    with caplog.at_level(logging.INFO, logger="shakedown"):
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(post_request(body)[: -len(body) // 2])
        wait_until(lambda: caplog.records, what="the abort is logged")
        assert httpx.get(f"http://127.0.0.1:{server.port}/live").status_code == 200
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "the client left while sending the body of POST /v1/chat/completions"
    )
    assert record.exc_info is None and "Traceback" not in caplog.text
