"""The local engine registry: engines by endpoint name, looked up on every request."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, TypeAlias

from .context import RequestContext

EngineItem: TypeAlias = dict[str, Any] | list[dict[str, Any]] | bytes
"""One output, or a batch of outputs ready at once (a list, handed to the pipeline whole), or
either already serialized as JSON (bytes, handed over as they are)."""
Engine: TypeAlias = Callable[[dict[str, Any], RequestContext], AsyncIterator[EngineItem]]
"""`async def generate(request: dict, context) -> AsyncIterator[dict]`, as Python workers have;
an engine may also yield lists of outputs when several are ready at once."""


class Registration(NamedTuple):
    engine: Engine
    loop: asyncio.AbstractEventLoop | None
    """The loop the engine runs on (the worker's), or None for the endpoint's own."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class EngineRegistry:
    """Thread-safe map from endpoint name to engine.

    Workers register from their own thread or loop while the endpoint reads from its
    loop thread; a request that arrives before `register` (or after `unregister`)
    gets a 503 rather than waiting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[str, Registration] = {}

    def register(
        self, name: str, engine: Engine, *, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        """Serve `engine` under `name`, on `loop`: by default the loop running this call, if
        any, so an engine registered from a worker's coroutine may use that loop's objects
        (queues, futures, an engine client). Each request's generator then runs there and
        its frames are handed to the endpoint's loop; registered from plain code, the
        engine runs on the endpoint's own loop."""
        if not callable(engine):
            raise TypeError(f"engine for {name!r} is not callable: {engine!r}")
        if loop is None:
            loop = _running_loop()
        with self._lock:
            self._engines[name] = Registration(engine, loop)

    def unregister(self, name: str) -> bool:
        """Remove `name`; returns whether it was registered."""
        with self._lock:
            return self._engines.pop(name, None) is not None

    def get(self, name: str) -> Registration | None:
        # A dict read is atomic; the lock orders writers against each other.
        return self._engines.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._engines)
