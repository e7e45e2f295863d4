"""``/live`` and ``/health`` for a validated worker.

The handlers are plain functions returning ``(status, body)`` so a worker's own status server
can mount them; :class:`HealthApp` is the same as an RSGI app, and :class:`HealthServer` hosts
it on its own thread when the worker has no status server.

Only validation writes readiness here, so /health cannot flap between writers; /live never
depends on validation, so a held worker is not restarted by its liveness probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

import orjson

from .config import Hold
from .lifecycle import WorkerValidation

_JSON = [("content-type", "application/json")]


def live_response() -> tuple[int, bytes]:
    """200 while the process runs."""
    return 200, b'{"status":"live","message":"Service is live"}'


def health_response(validation: WorkerValidation) -> tuple[int, bytes]:
    """200 when ready; 503 with the reason while a hold=health worker is not released.

    Under hold=card the card itself keeps traffic away, so /health is 200 throughout and only
    reports the validation state.
    """
    ready = validation.health_ready
    if validation.is_released or not validation.enabled:
        message = "Service is ready"
    elif validation.config.hold is Hold.CARD:
        message = f"Service is ready; model card held: {validation.reason}"
    else:
        message = validation.reason
    body = orjson.dumps(
        {
            "status": "ready" if ready else "not_ready",
            "message": message,
            "validation": validation.state if validation.enabled else "off",
        }
    )
    return (200 if ready else 503), body


class HealthApp:
    """RSGI app serving ``GET /live`` and ``GET /health``; anything else is 404."""

    def __init__(self, validation: WorkerValidation) -> None:
        self.validation = validation

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        if scope.path == "/live":
            status, body = live_response()
        elif scope.path == "/health":
            status, body = health_response(self.validation)
        else:
            message = f"Route not found: {scope.method} {scope.path}"
            status = 404
            body = orjson.dumps({"message": message, "type": "Not Found", "code": 404})
        if scope.method not in ("GET", "HEAD") and status != 404:
            proto.response_empty(405, [("allow", "GET")])
            return
        proto.response_bytes(status, _JSON, body)

    __call__ = __rsgi__


class HealthServer:
    """A small standalone server for the probes, on granian, on its own thread and loop.

    The socket is bound and listening before :meth:`start` returns, so :attr:`port` is known
    and a probe that arrives early waits in the backlog instead of being refused.
    """

    def __init__(self, validation: WorkerValidation, *, host: str = "127.0.0.1", port: int = 0):
        self._app = HealthApp(validation)
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the health server is not started")
        return self._port

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._requested_port))
            sock.listen(128)
            self._port = sock.getsockname()[1]
        except OSError:
            sock.close()
            raise
        # granian's listener takes the descriptor over and closes it on stop.
        fd = sock.detach()
        self._thread = threading.Thread(
            target=self._serve, args=(fd,), name="shakedown-health", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise RuntimeError("the health server failed to start") from self._error

    def _serve(self, fd: int) -> None:
        loop = _new_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._server = _prebound_server(self._app, fd)
            task = loop.create_task(self._server.serve())
            loop.call_soon(self._started.set)
            loop.run_until_complete(task)
        except BaseException as exc:
            self._error = exc
            self._started.set()
        finally:
            loop.close()

    def stop(self) -> None:
        loop, server, thread = self._loop, self._server, self._thread
        if loop is None or server is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed: the server is gone
            loop.call_soon_threadsafe(server.stop)
        thread.join()
        self._thread = None


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _prebound_server(app: HealthApp, fd: int) -> Any:
    # granian 2.8 has no public way to serve an existing socket (granian#848 is open); this
    # leans on _init_shared_socket, so pyproject pins granian<2.9 and a test covers it.
    from granian._granian import SocketHolder
    from granian.constants import HTTPModes, Interfaces
    from granian.server.embed import Server

    holder_type: Any = SocketHolder  # its stub omits the constructor

    class PreboundServer(Server):
        def _init_shared_socket(self) -> None:
            server: Any = self
            server._ssp = None
            server._shd = holder_type(fd, False, self.backlog)
            server._sfd = fd

    return PreboundServer(
        app, interface=Interfaces.RSGI, http=HTTPModes.http1, websockets=False, log_enabled=False
    )
