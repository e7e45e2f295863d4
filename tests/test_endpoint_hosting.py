"""Hosting the endpoint: loopback only, ports, start and stop, TCP settings, and staying up
under idle and slow connections (timeouts, the connection limit, shedding idle ones)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    TINY,
    closed_by_peer,
    counting_engine,
    post_request,
    wait_until,
)
from shakedown import hosting
from shakedown._core import Pipeline
from shakedown.endpoint import (
    EndpointApp,
    EngineRegistry,
    LoopbackServer,
    resolve_port,
)
from shakedown.hosting import ThreadedServer
from shakedown.validation import HealthServer, WorkerValidation


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


# --- idle and slow connections ----------------------------------------------------------

IDLE = 500


@pytest.fixture
def open_files() -> Iterator[None]:
    """Room for `IDLE` client sockets and the server's side of each, in this one process."""
    needed = 2 * IDLE + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """`count` connections to `port` that never send a byte (a slowloris)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        held.append(sock)
    return held


def test_idle_connections_do_not_hold_the_endpoint(
    pipeline: Pipeline, registry: EngineRegistry, open_files: None
) -> None:
    registry.register(NAME, counting_engine())
    app = EndpointApp(pipeline, registry, NAME, api_key="s3cret")
    with LoopbackServer(app) as srv:
        held = idle_connections(srv.port, IDLE)
        try:
            # Before: the first 128 held every request until hyper dropped them (30 s).
            with httpx.Client(
                base_url=f"http://127.0.0.1:{srv.port}",
                headers={"authorization": "Bearer s3cret"},
                timeout=10,
            ) as client:
                assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
                assert client.get("/live").status_code == 200
                assert client.get("/health").status_code == 200
        finally:
            for sock in held:
                sock.close()


def test_idle_connections_do_not_hold_the_health_server(open_files: None) -> None:
    health = HealthServer(WorkerValidation.from_env({}))
    health.start()
    try:
        held = idle_connections(health.port, IDLE)
        try:
            for path in ("/live", "/health"):
                r = httpx.get(f"http://127.0.0.1:{health.port}{path}", timeout=10)
                assert r.status_code == 200
        finally:
            for sock in held:
                sock.close()
    finally:
        health.stop()


def test_the_longest_idle_connections_are_shed_at_the_limit(
    pipeline: Pipeline, registry: EngineRegistry
) -> None:
    registry.register(NAME, counting_engine())
    limit = 32
    hosted = ThreadedServer(
        EndpointApp(pipeline, registry, NAME), host="127.0.0.1", port=0, what="test", limit=limit
    )
    hosted.start()
    try:
        oldest = idle_connections(hosted.port, limit // 2)
        # Old enough to be shed (younger ones may be between their request head and handler).
        time.sleep(hosting.MIN_IDLE_S)
        newer = idle_connections(hosted.port, limit)
        try:
            # The limit is held and clients queue; room is made for this one.
            url = f"http://127.0.0.1:{hosted.port}/v1/chat/completions"
            assert httpx.post(url, json=CHAT, timeout=10).status_code == 200
            assert all(closed_by_peer(sock) for sock in oldest)
            assert not all(closed_by_peer(sock) for sock in newer)
        finally:
            for sock in oldest + newer:
                sock.close()
    finally:
        assert hosted.stop()


def test_a_request_in_flight_is_never_shed(pipeline: Pipeline, registry: EngineRegistry) -> None:
    release = threading.Event()

    async def slow(request: dict[str, Any], context: Any) -> AsyncIterator[dict[str, Any]]:
        while not release.is_set():  # silent for as long as the test needs
            await asyncio.sleep(0.01)
        yield {"token_ids": [], "finish_reason": "length"}

    registry.register(NAME, slow)
    limit = 16
    hosted = ThreadedServer(
        EndpointApp(pipeline, registry, NAME), host="127.0.0.1", port=0, what="test", limit=limit
    )
    hosted.start()
    try:
        busy = socket.create_connection(("127.0.0.1", hosted.port))
        busy.sendall(post_request(orjson.dumps(CHAT)))
        wait_until(lambda: hosted.app.in_flight == 1, what="the request is in the handler")
        time.sleep(hosting.MIN_IDLE_S)  # it is now the longest idle connection at the TCP level
        idle = idle_connections(hosted.port, limit)
        try:
            wait_until(
                lambda: any(closed_by_peer(sock) for sock in idle), what="idle ones are shed"
            )
            release.set()
            busy.settimeout(10)
            assert busy.recv(65536).startswith(b"HTTP/1.1 200")
        finally:
            for sock in [busy, *idle]:
                sock.close()
    finally:
        assert hosted.stop()


def test_the_request_head_must_arrive_within_the_header_timeout(
    pipeline: Pipeline, registry: EngineRegistry
) -> None:
    hosted = ThreadedServer(
        EndpointApp(pipeline, registry, NAME),
        host="127.0.0.1",
        port=0,
        what="test",
        header_read_timeout=0.2,
    )
    hosted.start()
    try:
        silent = socket.create_connection(("127.0.0.1", hosted.port))
        partial = socket.create_connection(("127.0.0.1", hosted.port))
        partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        # hyper's default waited 30 s; well within 5 s here.
        wait_until(lambda: closed_by_peer(silent) and closed_by_peer(partial), what="dropped")
        silent.close()
        partial.close()
    finally:
        assert hosted.stop()


def test_a_request_head_over_64_kib_is_refused(server: LoopbackServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b"GET /live HTTP/1.1\r\nhost: x\r\nx-padding: ")
        # hyper buffered up to ~400 KiB of an unfinished head.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(b"a" * (hosting.MAX_HEAD_BYTES + 16 * 1024))
        conn.settimeout(5)
        assert conn.recv(64).startswith(b"HTTP/1.1 431 Request Header Fields Too Large")


EXIT_WITH_SERVER_UP = """
from shakedown.endpoint import EngineRegistry, ModelCard, attach
from shakedown.validation import HealthServer, WorkerValidation
endpoint = attach(ModelCard(%r, served_name="tiny"), EngineRegistry())
HealthServer(WorkerValidation.from_env({})).start()
print(endpoint.port, flush=True)
"""


def test_exiting_with_servers_up_prints_no_panic() -> None:
    # granian's threads used to call into the finalizing interpreter: a Rust panic, an abort.
    code = EXIT_WITH_SERVER_UP % str(TINY)
    for _ in range(8):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert "panicked" not in done.stderr, done.stderr
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().isdigit()


def test_the_app_is_told_the_loop_it_serves_on() -> None:
    # granian hands an app its loop through `__rsgi_init__`; the host's own wrapper (the
    # busy tracker, on Linux) must pass it on.
    class App:
        def __init__(self) -> None:
            self.loop: asyncio.AbstractEventLoop | None = None

        def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self.loop = loop

        async def __rsgi__(self, scope: Any, proto: Any) -> None:
            served_on_it = asyncio.get_running_loop() is self.loop
            proto.response_bytes(200, [], b"yes" if served_on_it else b"no")

    hosted = ThreadedServer(App(), host="127.0.0.1", port=0, what="test")
    hosted.start()
    try:
        assert httpx.get(f"http://127.0.0.1:{hosted.port}/", timeout=10).content == b"yes"
    finally:
        assert hosted.stop()
