"""The per-request context handed to an engine, shaped like Dynamo's Python `Context`."""

from __future__ import annotations

from typing import Protocol


class EngineContext(Protocol):
    """What an engine may ask of its request's context; the endpoint passes a
    `RequestContext`, and engines that take any such context type it as this."""

    @property
    def id(self) -> str: ...

    def is_stopped(self) -> bool: ...


class RequestContext:
    """What an engine sees of its request's life: its id and whether to stop.

    The endpoint calls `stop_generating()` when the client goes away or the server
    stops; engines that poll `is_stopped()` between steps can end early and cheaply.
    """

    __slots__ = ("_id", "_stopped")

    def __init__(self, request_id: str) -> None:
        self._id = request_id
        self._stopped = False

    @property
    def id(self) -> str:
        return self._id

    def is_stopped(self) -> bool:
        return self._stopped

    def stop_generating(self) -> None:
        self._stopped = True

    def __repr__(self) -> str:
        return f"RequestContext(id={self._id!r}, stopped={self._stopped})"
