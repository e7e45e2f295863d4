"""Requests in flight, and the one timer that looks after all of them.

Per request, a timeout on the body read and a task waiting for the client to disconnect
cost more than the rest of the endpoint's own Python (most requests end long before
either matters). Instead one timer ticks every `interval` seconds while requests are in
flight: it cancels a body read past its deadline, and it starts the disconnect watcher of
a request still running at its second tick (so a request that ends within a tick never
has one). A deadline therefore fires up to one interval late, and a disconnect is seen up
to two intervals after it happens.
"""

from __future__ import annotations

import asyncio
from typing import Any

from granian._granian import RSGIHTTPProtocol as HTTPProtocol

from .context import RequestContext

TICK_S = 0.05
"""The longest a tick waits; shorter when the body deadline is (a quarter of it)."""


def absorb_cancel(task: asyncio.Task[Any]) -> None:
    """We cancelled this task ourselves and handled it; clear the request so later awaits
    (and asyncio.timeout users) behave normally. `uncancel` exists from 3.11."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()


class Active:
    """A request in flight, so `close()` and a disconnect can interrupt it."""

    __slots__ = ("context", "disconnected", "proto", "seen", "stopping", "task", "watcher")

    def __init__(self, task: asyncio.Task[Any], context: RequestContext, proto: HTTPProtocol):
        self.task = task
        self.context = context
        self.proto = proto
        self.disconnected = False
        self.stopping = False
        self.seen = False  # by a tick: the next one starts the watcher
        self.watcher: asyncio.Future[Any] | None = None

    @property
    def interrupted(self) -> bool:
        return self.disconnected or self.stopping

    def watch(self) -> None:
        self.watcher = asyncio.ensure_future(self.proto.client_disconnect())
        self.watcher.add_done_callback(self._on_disconnect)

    def unwatch(self) -> None:
        if self.watcher is not None:
            self.watcher.remove_done_callback(self._on_disconnect)
            self.watcher.cancel()

    def _on_disconnect(self, _: object) -> None:
        if self.task.done():
            return
        self.disconnected = True
        self.context.stop_generating()
        self.task.cancel()

    def stop(self) -> None:
        self.stopping = True
        self.context.stop_generating()
        self.task.cancel()


class InFlight:
    """The requests in flight and the body reads under way; call on the app's loop."""

    def __init__(self, body_read_timeout: float) -> None:
        self.body_read_timeout = body_read_timeout
        self.interval = min(TICK_S, body_read_timeout / 4)
        self.active: set[Active] = set()
        self._reading: dict[asyncio.Task[Any], float] = {}
        self._timed_out: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def reading(self, task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop) -> None:
        """`task`, running on `loop`, starts reading a body: it is cancelled once past its
        deadline."""
        self._reading[task] = loop.time() + self.body_read_timeout
        self._wake(loop)

    def read(self, task: asyncio.Task[Any]) -> None:
        """`task` is done reading its body (whole, or not)."""
        self._reading.pop(task, None)

    def timed_out(self, task: asyncio.Task[Any]) -> bool:
        """Whether `task` was cancelled for its body deadline (answers once)."""
        if task not in self._timed_out:
            return False
        self._timed_out.discard(task)
        absorb_cancel(task)
        return True

    def add(self, active: Active, loop: asyncio.AbstractEventLoop) -> None:
        """`active`, running on `loop`, is in flight."""
        self.active.add(active)
        self._wake(loop)

    def discard(self, active: Active) -> None:
        active.unwatch()
        self.active.discard(active)

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is None:
            self._timer = loop.call_later(self.interval, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for task, deadline in list(self._reading.items()):
            if deadline <= now:
                del self._reading[task]
                self._timed_out.add(task)
                task.cancel()
        for active in self.active:
            if active.watcher is None:
                if active.seen:
                    active.watch()
                else:
                    active.seen = True
        if self._reading or self.active:
            self._wake(loop)
