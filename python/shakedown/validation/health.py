"""``/live`` and ``/health`` for a validated worker.

The handlers are plain functions returning ``(status, body)`` so a worker's own status server
can mount them; :class:`HealthApp` is the same as an RSGI app, and :class:`HealthServer` hosts
it on its own thread when the worker has no status server.

Only validation writes readiness here, so /health cannot flap between writers; /live never
depends on validation, so a held worker is not restarted by its liveness probe.
"""

from __future__ import annotations

from typing import Any

import orjson

from shakedown._core import route_not_found

from ..hosting import ThreadedServer
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
            status, body = 404, route_not_found(scope.method, scope.path).body
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
        self._hosted = ThreadedServer(
            HealthApp(validation), host=host, port=port, what="health server"
        )

    @property
    def port(self) -> int:
        return self._hosted.port

    def start(self) -> None:
        self._hosted.start()

    def stop(self) -> None:
        self._hosted.stop(timeout=None)
