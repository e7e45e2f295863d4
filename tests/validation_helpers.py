"""Shared by the validation tests: the tiny model served by the production loopback endpoint
through the mocker engine, real local sidecars, and process checks."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from shakedown._core import Pipeline
from shakedown.cli import TINY_MODEL, TINY_PARSERS, make_mocker
from shakedown.endpoint import Engine, ModelCard
from shakedown.validation.lifecycle import ValidatedEndpoint, loopback_endpoint

SERVED = "tiny-under-test"


def tiny_card(served_name: str = SERVED, **fields: Any) -> ModelCard:
    reasoning_parser, tool_call_parser = TINY_PARSERS
    return ModelCard(
        str(TINY_MODEL),
        served_name=served_name,
        reasoning_parser=reasoning_parser,
        tool_call_parser=tool_call_parser,
        **fields,
    )


def tiny_engine() -> Engine:
    """The real mocker engine over the packaged tiny model."""
    generate: Engine = make_mocker(Pipeline(str(TINY_MODEL)), TINY_MODEL).generate
    return generate


class Factory:
    """The production endpoint factory, recording what it was asked for and what it built."""

    def __init__(self) -> None:
        self.made: list[ValidatedEndpoint] = []
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self, card: Any, *, port: int, api_key: str, enable_rl: bool, pipeline: Any = None
    ) -> ValidatedEndpoint | None:
        self.calls.append(
            {"port": port, "api_key": api_key, "enable_rl": enable_rl, "pipeline": pipeline}
        )
        endpoint = loopback_endpoint(
            card, port=port, api_key=api_key, enable_rl=enable_rl, pipeline=pipeline
        )
        if endpoint is not None:
            self.made.append(endpoint)
        return endpoint


def status(url: str, token: str | None = None, body: dict[str, Any] | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def chat_status(port: int, token: str, model: str = SERVED) -> int:
    """What a one-message chat completion gets: 200 served, 503 no engine yet."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    return status(f"http://127.0.0.1:{port}/v1/chat/completions", token, body)


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return False
    return True


def py(code: str) -> list[str]:
    """argv for a gate that runs ``code`` in this interpreter."""
    return [sys.executable, "-c", code]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_gone(pid: int) -> bool:
    """Dead or a zombie (killed, waiting for a parent that is not us to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_for_file(path: Path, timeout_s: float = 5.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} never written")


class Sidecar:
    """A URL-gate sidecar: records each POSTed JSON body and answers ``status``."""

    def __init__(
        self,
        status: int = 200,
        port: int = 0,
        host: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        sidecar = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                sidecar.bodies.append(json.loads(self.rfile.read(length)))
                body = b'{"ok": true}' if sidecar.status == 200 else b"chat template is wrong"
                self.send_response(sidecar.status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self.server = Server((host, port), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        netloc = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if tls else 'http'}://{netloc}:{self.port}/validate"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawSidecar:
    """A sidecar on a bare socket that answers each request through ``answer(conn)``: for
    answers no HTTP server library would send (trickled, cut short, never)."""

    def __init__(self, answer: Callable[[socket.socket, threading.Event], None]) -> None:
        self._answer = answer
        self.stopped = threading.Event()
        self.requests = 0
        self.request_seen = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/validate"
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests += 1
            self.request_seen.set()
            with contextlib.suppress(OSError):  # the client gave up: what the test is about
                self._answer(conn, self.stopped)

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        for thread in self._threads:
            thread.join(10)


def trickle(payload: bytes, every_s: float) -> Callable[[socket.socket, threading.Event], None]:
    """An answer sent a byte at a time, ``every_s`` apart, until sent or the sidecar stops."""

    def answer(conn: socket.socket, stopped: threading.Event) -> None:
        for byte in payload:
            conn.sendall(bytes([byte]))
            if stopped.wait(every_s):
                return

    return answer


def send(payload: bytes) -> Callable[[socket.socket, threading.Event], None]:
    """An answer sent at once, then the connection closed."""

    def answer(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(payload)

    return answer


def never_answer(conn: socket.socket, stopped: threading.Event) -> None:
    """Hold the connection open without a byte of answer until the sidecar stops."""
    stopped.wait()
