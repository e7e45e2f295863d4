"""The worker's in-flight user requests: rechecks start only when there are none."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class Activity:
    """Counts the worker's in-flight user requests, for rechecks to start only when idle.

    ``with validation.activity.request(): ...`` around each user request (sync or async
    code alike), or ``begin()`` / ``end()`` in pairs. Never count the loopback's own
    requests: they are the recheck.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._started = 0
        self._idle_since = time.monotonic()

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._started += 1

    def end(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                raise RuntimeError("Activity.end() without a matching begin()")
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle_since = time.monotonic()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def mark(self) -> tuple[int, int]:
        """(requests started so far, in flight now): compare two to see if work happened."""
        with self._lock:
            return self._started, self._in_flight

    def idle_for(self) -> float:
        """Seconds since the last user request ended; 0 while one is in flight."""
        with self._lock:
            return 0.0 if self._in_flight else time.monotonic() - self._idle_since
