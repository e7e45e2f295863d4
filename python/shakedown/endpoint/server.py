"""Hosting the endpoint: on 127.0.0.1 only, from a thread of its own (see `shakedown.hosting`)."""

from __future__ import annotations

import os
from typing import Any

from ..hosting import ThreadedServer
from .app import EndpointApp

LOOPBACK = "127.0.0.1"
PORT_ENV = "DYN_WORKER_VALIDATION_LOCAL_PORT"


def resolve_port(port: int | None = None) -> int:
    """`port`, else `DYN_WORKER_VALIDATION_LOCAL_PORT`, else 0 (ephemeral)."""
    if port is None:
        raw = os.environ.get(PORT_ENV, "").strip()
        if not raw:
            return 0
        try:
            port = int(raw)
        except ValueError:
            raise ValueError(f"{PORT_ENV}={raw!r} is not a port number") from None
        source = PORT_ENV
    else:
        source = "port"
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{source} must be an integer in 0..65535, got {port!r}")
    return port


def check_loopback(host: str) -> None:
    """The endpoint has no authentication: it may only ever listen on 127.0.0.1."""
    if host != LOOPBACK:
        raise ValueError(f"the validation endpoint only binds {LOOPBACK}, refusing {host!r}")


class LoopbackServer:
    """Serves an `EndpointApp` on 127.0.0.1 from a thread of its own.

    `start()` returns once the port is listening; `stop()` ends open streams with an
    error event and `[DONE]`, and returns within `timeout` seconds.
    """

    def __init__(self, app: EndpointApp, *, port: int | None = None, host: str = LOOPBACK):
        check_loopback(host)
        self.app = app
        self._hosted = ThreadedServer(
            app, host=LOOPBACK, port=resolve_port(port), what="loopback endpoint", on_stop=app.close
        )

    @property
    def port(self) -> int:
        return self._hosted.port

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._hosted.running

    def start(self, timeout: float = 10.0) -> None:
        self._hosted.start(timeout)

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop serving; returns whether the server thread ended within `timeout`."""
        return self._hosted.stop(timeout)

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
