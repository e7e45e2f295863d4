"""Hosting the endpoint: loopback only, ports, start and stop, TCP settings, and staying up
under idle and slow connections (timeouts, the connection limit, shedding idle ones)."""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time

import httpx
import orjson
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    counting_engine,
)
from shakedown._core import Pipeline
from shakedown.endpoint import (
    EndpointApp,
    EngineRegistry,
    LoopbackServer,
    resolve_port,
)


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
