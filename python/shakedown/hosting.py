"""granian's embedded server on a thread and event loop of its own, over a socket bound first.

The listening socket is bound and listening before the server starts, so the port is known at
once and early clients wait in the backlog instead of being refused. It carries TCP_NODELAY,
which Linux copies onto every accepted connection: granian doesn't set it, and without it each
reused keep-alive stream stalls about 40 ms on the client's delayed ACK.

granian 2.8 has no public way to serve an existing socket (granian#848 is open): the socket is
handed over through private names (`_init_shared_socket`, `SocketHolder`), which is why
pyproject pins granian to 2.8.x and the tests start real servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from granian.constants import HTTPModes, Interfaces
from granian.server.embed import Server

log = logging.getLogger("shakedown.hosting")

BACKLOG = 128


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (`host`, `port`) and listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit TCP_NODELAY from the listener on Linux.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
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

    def __init__(self, app: Any, fd: int) -> None:
        self._prebound_fd = fd
        super().__init__(
            app,
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


class ThreadedServer:
    """Serves an RSGI `app` on (`host`, `port`) from a thread of its own.

    `start()` returns once the port is listening. `stop()` first runs `on_stop` on the
    server's loop (to end open requests), then stops granian.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        what: str,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self._host = host
        self._requested_port = port
        self._what = what  # names the server in threads, errors and logs
        self._on_stop = on_stop
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _PreBoundServer | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"the {self._what} has not been started")
        return self._port

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            raise RuntimeError(f"the {self._what} was already started")
        sock = listen(self._host, self._requested_port)
        self._port = sock.getsockname()[1]
        # granian's listener owns the fd from here on and closes it on stop.
        fd = sock.detach()
        name = f"shakedown-{self._what.replace(' ', '-')}-{self._port}"
        self._thread = threading.Thread(target=self._run, args=(fd,), name=name, daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the {self._what} did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"the {self._what} failed to start") from self._error

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
            log.exception("the %s stopped with an error", self._what)
        finally:
            self._started.set()
            if not handed_over:
                os.close(fd)
            loop.close()

    def stop(self, timeout: float | None = 1.0) -> bool:
        """Stop serving; returns whether the server thread ended within `timeout`
        (None: wait as long as it takes)."""
        thread, loop = self._thread, self._loop
        if thread is None or not thread.is_alive() or loop is None:
            return True
        with contextlib.suppress(RuntimeError):  # the loop closed in between
            loop.call_soon_threadsafe(self._shutdown)
        if threading.current_thread() is thread:
            return False  # called on our own loop (a handler, an engine): it ends after we return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the %s did not stop within %.1f s", self._what, timeout)
            return False
        return True

    def _shutdown(self) -> None:
        if self._on_stop is not None:
            self._on_stop()
        if self._server is not None:
            self._server.stop()  # type: ignore[no-untyped-call]
