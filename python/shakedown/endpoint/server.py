"""Hosting: granian's embedded server on its own thread and uvloop loop, on 127.0.0.1.

The listening socket is bound and listening before the server starts (so the port is
known at once and early clients wait in the backlog) and carries TCP_NODELAY, which
Linux copies onto every accepted connection: granian doesn't set it, and without it
each reused keep-alive stream stalls about 40 ms on the client's delayed ACK.
The socket is handed to granian through private names (`_init_shared_socket`,
`SocketHolder`), which is why granian is pinned to 2.8.x.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from typing import Any

from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

from .app import EndpointApp

log = logging.getLogger("shakedown.endpoint")

LOOPBACK = "127.0.0.1"
PORT_ENV = "DYN_WORKER_VALIDATION_LOCAL_PORT"
BACKLOG = 128


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


def bind_listener(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Accepted sockets inherit TCP_NODELAY from the listener on Linux.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # no uvloop on Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _PreBoundServer(Server):
    """granian's embedded server serving a socket we already bound."""

    def __init__(self, app: EndpointApp, fd: int) -> None:
        self._prebound_fd = fd
        super().__init__(
            app,
            address=LOOPBACK,
            port=0,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            websockets=False,
            backlog=BACKLOG,
            log_enabled=False,
        )

    def _init_shared_socket(self) -> None:
        from granian._granian import SocketHolder

        # Private state granian's workers read; the stub doesn't declare these types or
        # SocketHolder's (fd, is_uds, backlog) constructor.
        self._ssp = None
        self._shd = SocketHolder(self._prebound_fd, False, self.backlog)  # type: ignore[call-arg,assignment]
        self._sfd = self._prebound_fd  # type: ignore[assignment]


class LoopbackServer:
    """Serves an `EndpointApp` on 127.0.0.1 from a thread of its own.

    `start()` returns once the port is listening; `stop()` ends open streams with an
    error event and `[DONE]`, and returns within `timeout` seconds.
    """

    def __init__(self, app: EndpointApp, *, port: int | None = None, host: str = LOOPBACK):
        check_loopback(host)
        self.app = app
        self._requested_port = resolve_port(port)
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _PreBoundServer | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has not been started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            raise RuntimeError("the server was already started")
        sock = bind_listener(self._requested_port)
        self._port = sock.getsockname()[1]
        # granian's listener owns the fd from here on and closes it on stop.
        fd = sock.detach()
        self._thread = threading.Thread(
            target=self._run, args=(fd,), name=f"shakedown-endpoint-{self._port}", daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the endpoint did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError("the endpoint failed to start") from self._error

    def _run(self, fd: int) -> None:
        loop = _new_loop()
        asyncio.set_event_loop(loop)
        handed_over = False
        try:
            server = _PreBoundServer(self.app, fd)
            server.on_startup(self._started.set)
            self._loop, self._server = loop, server
            handed_over = True
            loop.run_until_complete(server.serve())
        except BaseException as exc:
            self._error = exc
            log.exception("the loopback endpoint stopped with an error")
        finally:
            self._started.set()
            if not handed_over:
                os.close(fd)
            loop.close()

    def stop(self, timeout: float = 1.0) -> bool:
        """Stop serving; returns whether the server thread ended within `timeout`."""
        thread, loop = self._thread, self._loop
        if thread is None or not thread.is_alive() or loop is None:
            return True
        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(self._shutdown)
        if threading.current_thread() is thread:
            return False  # called on our own loop (a handler, an engine): it ends after we return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the loopback endpoint did not stop within %.1f s", timeout)
            return False
        return True

    def _shutdown(self) -> None:
        self.app.close()
        if self._server is not None:
            self._server.stop()  # type: ignore[no-untyped-call]

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
