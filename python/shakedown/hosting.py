"""granian's embedded server on a thread and event loop of its own, over a socket bound first.

The listening socket is bound and listening before the server starts, so the port is known at
once and early clients wait in the backlog instead of being refused. It carries TCP_NODELAY,
which Linux copies onto every accepted connection: granian doesn't set it, and without it each
reused keep-alive stream stalls about 40 ms on the client's delayed ACK.

Idle connections can't hold the server: hyper drops a connection whose request head has not
arrived within `HEADER_READ_TIMEOUT_S` (the same timer bounds a keep-alive connection's wait
for its next request), granian serves up to `connection_limit()` connections at once, and on
Linux a guard sheds the longest-idle connections when that limit is reached (see
`_ConnectionGuard`). Servers still running when the interpreter exits are stopped first, so
granian's threads never call into a finalizing interpreter.

granian 2.8 has no public way to serve an existing socket (granian#848 is open): the socket is
handed over through private names (`_init_shared_socket`, `SocketHolder`), which is why
pyproject pins granian to 2.8.x and the tests start real servers.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from granian.constants import HTTPModes, Interfaces
from granian.http import HTTP1Settings
from granian.server.embed import Server

log = logging.getLogger("shakedown.hosting")

BACKLOG = 512
"""Room for a burst of connections: past the backlog, Linux drops a SYN and the client waits
a second to retry."""
HEADER_READ_TIMEOUT_S = 10.0
"""A request head must arrive whole within this; an idle keep-alive connection is closed after it."""
MAX_CONNECTIONS = 1024
MAX_HEAD_BYTES = 64 * 1024
"""hyper's read buffer (default ~400 KiB): bounds what a connection that never finishes its
request head can make the server hold."""
GUARD_INTERVAL_S = 1.0
GUARD_QUEUED_INTERVAL_S = 0.25
"""The guard looks at the accept queue every second, and four times a second while clients
wait there (each look wakes the loop: ~0.1 ms of CPU)."""
MIN_IDLE_S = 0.25
"""A connection that received data more recently may be between its request head and its
handler, so the guard leaves it alone."""


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


def connection_limit() -> int:
    """How many connections a server serves at once: `MAX_CONNECTIONS`, or a quarter of the
    process's open-file limit when that is lower (the worker needs its files too)."""
    try:
        import resource
    except ImportError:  # Windows
        return MAX_CONNECTIONS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(64, min(MAX_CONNECTIONS, soft // 4))


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # no uvloop on Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _PreBoundServer(Server):
    """granian's embedded server serving a socket we already bound."""

    def __init__(self, app: Any, fd: int, *, limit: int, header_read_timeout: float) -> None:
        self._prebound_fd = fd
        super().__init__(
            app,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            websockets=False,
            backlog=BACKLOG,
            # granian accepts a connection only while it serves fewer than this many.
            backpressure=limit,
            http1_settings=HTTP1Settings(
                header_read_timeout=int(header_read_timeout * 1000), max_buffer_size=MAX_HEAD_BYTES
            ),
            log_enabled=False,
        )

    def _init_shared_socket(self) -> None:
        from granian._granian import SocketHolder

        # Private state granian's workers read; the stub doesn't declare these types or
        # SocketHolder's (fd, is_uds, backlog) constructor.
        self._ssp = None
        self._shd = SocketHolder(self._prebound_fd, False, self.backlog)  # type: ignore[call-arg,assignment]
        self._sfd = self._prebound_fd  # type: ignore[assignment]


class _BusyTracker:
    """The RSGI app, keeping the scopes of the requests in flight, so the guard never sheds a
    connection that is serving one. A scope's client address (a string granian formats on
    each read) is read only when the guard sheds."""

    __slots__ = ("_app", "_call", "busy")

    def __init__(self, app: Any) -> None:
        self._app = app
        self._call = getattr(app, "__rsgi__", app)
        self.busy: set[Any] = set()

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        init = getattr(self._app, "__rsgi_init__", None)
        if init is not None:
            init(loop)

    def busy_clients(self) -> set[str]:
        """The client addresses (`host:port`) of the requests in flight."""
        return {scope.client for scope in self.busy}

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        busy = self.busy
        busy.add(scope)
        try:
            await self._call(scope, proto)
        finally:
            busy.discard(scope)


# struct tcp_info (linux/tcp.h): eight one-byte fields, then 32-bit ones. On a listening
# socket `tcpi_unacked` is the accept queue's length.
_TCPI_UNACKED = 24
_TCPI_LAST_DATA_RECV = 52
_TCP_INFO_SIZE = 104
# /proc/net/tcp states: ESTABLISHED, CLOSE_WAIT (the peer closed; hyper hasn't yet).
_HELD_STATES = ("01", "08")


def _tcp_info_u32(sock: socket.socket, offset: int) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    value: int = struct.unpack_from("I", info, offset)[0]
    return value


def _held_inodes(port: int) -> set[int]:
    """Inodes of the sockets this process may hold for connections accepted on `port`."""
    inodes: set[int] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] in _HELD_STATES and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(int(fields[9]))
        except OSError:
            continue
    return inodes


def _address(client: str) -> tuple[str, int]:
    """granian's `host:port` (`[host]:port` for IPv6) as `getpeername()` gives it."""
    host, _, port = client.rpartition(":")
    return host.strip("[]"), int(port)


class _ConnectionGuard:
    """Sheds the longest-idle connections when the server holds its connection limit (Linux).

    granian stops accepting while it serves `limit` connections, and hyper drops a silent one
    only after the header-read timeout: without this, `limit` idle sockets would keep every
    other client waiting until then, and reconnecting would keep them waiting for good. Every
    `GUARD_INTERVAL_S` the guard reads the listener's accept queue; when clients wait there
    and the limit is held, it shuts down the connections not serving a request, longest idle
    first, enough to admit everyone queued and leave a quarter of the limit free. It finds
    them among the process's file descriptors (by the inodes `/proc/self/net/tcp` lists for
    the port) and shuts them down through duplicates, so hyper sees an end of stream and frees
    the slot.
    """

    def __init__(self, listener: socket.socket, limit: int, tracker: _BusyTracker) -> None:
        self._listener = listener
        self._port: int = listener.getsockname()[1]
        self._limit = limit
        self._tracker = tracker
        self._timer: asyncio.TimerHandle | None = None
        self._shed_since_log = 0
        self._logged_at = 0.0

    @staticmethod
    def supported() -> bool:
        return sys.platform == "linux" and hasattr(socket, "TCP_INFO")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(GUARD_INTERVAL_S, self._tick, loop)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._listener.close()

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            queued = _tcp_info_u32(self._listener, _TCPI_UNACKED)
            if queued:
                self.shed(queued)
        except Exception:
            log.exception("the connection guard on port %d failed; it stops", self._port)
            self.close()
            return
        delay = GUARD_QUEUED_INTERVAL_S if queued else GUARD_INTERVAL_S
        self._timer = loop.call_later(delay, self._tick, loop)

    def shed(self, queued: int) -> int:
        """With the limit held, shut down enough idle connections to admit the `queued`
        clients and leave a quarter of the limit free; returns how many."""
        held = self._held_connections()
        try:
            if len(held) < self._limit:
                return 0
            excess = len(held) - self._limit + max(queued, self._limit // 4)
            busy = {_address(client) for client in self._tracker.busy_clients()}
            idle = [
                (idle_ms, sock)
                for idle_ms, peer, sock in held
                if peer not in busy and idle_ms >= MIN_IDLE_S * 1000
            ]
            idle.sort(key=lambda pair: pair[0], reverse=True)
            for _, sock in idle[:excess]:
                with contextlib.suppress(OSError):  # it closed in between
                    sock.shutdown(socket.SHUT_RDWR)
            shed = min(excess, len(idle))
        finally:
            for _, _, sock in held:
                sock.close()  # only our duplicate
        self._log(shed)
        return shed

    def _held_connections(self) -> list[tuple[int, tuple[str, int], socket.socket]]:
        """(ms since data last arrived, peer, a duplicate socket) per connection held."""
        inodes = _held_inodes(self._port)
        held: list[tuple[int, tuple[str, int], socket.socket]] = []
        if not inodes:
            return held
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
                if not target.startswith("socket:[") or int(target[8:-1]) not in inodes:
                    continue
                fd = os.dup(int(name))
            except (OSError, ValueError):
                continue
            sock = socket.socket(fileno=fd)
            try:
                # The descriptor may have been closed and reused since it was listed.
                if os.fstat(fd).st_ino != int(target[8:-1]):
                    sock.close()
                    continue
                peer = sock.getpeername()
                idle_ms = _tcp_info_u32(sock, _TCPI_LAST_DATA_RECV)
            except OSError:
                sock.close()
                continue
            held.append((idle_ms, (peer[0], peer[1]), sock))
        return held

    def _log(self, shed: int) -> None:
        self._shed_since_log += shed
        now = time.monotonic()
        if self._shed_since_log and now - self._logged_at >= 10.0:
            log.warning(
                "port %d: %d connections held (the limit); closed %d idle ones",
                self._port,
                self._limit,
                self._shed_since_log,
            )
            self._shed_since_log, self._logged_at = 0, now


# Servers still running at interpreter exit are stopped then, before granian's threads can
# call into a finalizing interpreter (a Rust panic and an abort).
_running: weakref.WeakSet[ThreadedServer] = weakref.WeakSet()


@atexit.register
def _stop_running_servers() -> None:
    for server in list(_running):
        server.stop(timeout=2.0)


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
        limit: int | None = None,
        header_read_timeout: float = HEADER_READ_TIMEOUT_S,
    ) -> None:
        """`limit`: connections served at once (default `connection_limit()`)."""
        self.app = app
        self._host = host
        self._requested_port = port
        self._what = what  # names the server in threads, errors and logs
        self._on_stop = on_stop
        self._limit = connection_limit() if limit is None else limit
        self._header_read_timeout = header_read_timeout
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _PreBoundServer | None = None
        self._guard: _ConnectionGuard | None = None
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
        app = self.app
        if _ConnectionGuard.supported():
            tracker = _BusyTracker(app)
            # The guard reads the accept queue through a duplicate of the listener.
            self._guard = _ConnectionGuard(sock.dup(), self._limit, tracker)
            app = tracker
        # granian's listener owns the fd from here on and closes it on stop.
        fd = sock.detach()
        name = f"shakedown-{self._what.replace(' ', '-')}-{self._port}"
        self._thread = threading.Thread(target=self._run, args=(app, fd), name=name, daemon=True)
        _running.add(self)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the {self._what} did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"the {self._what} failed to start") from self._error

    def _run(self, app: Any, fd: int) -> None:
        loop = _new_loop()
        asyncio.set_event_loop(loop)
        handed_over = False
        try:
            server = _PreBoundServer(
                app, fd, limit=self._limit, header_read_timeout=self._header_read_timeout
            )
            server.on_startup(self._started.set)
            self._loop, self._server = loop, server
            handed_over = True
            if self._guard is not None:
                self._guard.start(loop)
            loop.run_until_complete(server.serve())
        except BaseException as exc:
            self._error = exc
            log.exception("the %s stopped with an error", self._what)
        finally:
            self._started.set()
            if self._guard is not None:
                self._guard.close()
            if not handed_over:
                os.close(fd)
            loop.close()
            _running.discard(self)

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
        if self._guard is not None:
            self._guard.close()
        if self._on_stop is not None:
            self._on_stop()
        if self._server is not None:
            self._server.stop()  # type: ignore[no-untyped-call]
