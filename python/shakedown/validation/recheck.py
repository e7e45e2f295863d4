"""After release: re-run a cheap suite against the loopback while the worker is idle.

Off unless ``DYN_WORKER_VALIDATION_RECHECK_S`` is set. Each recheck starts only once the
worker has had no user request in flight for the whole interval (:class:`Activity`), runs
``shakedown.checks``' runner against the loopback (every stream read whole, each request
bounded by its own timeout), and ends ``passed``, ``failed`` or ``inconclusive``: a failure
while a user request started or was in flight is inconclusive, since a busy engine may be
slow or refuse for reasons that are not a fault. Only failures count towards unreleasing
the worker, only passes towards re-releasing it; an inconclusive recheck resets neither.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shakedown.checks import CheckResult, Settings, Suite, run_suite
from shakedown.checks.suite import suite_from_table

from .activity import Activity

logger = logging.getLogger("shakedown.validation")

Verdict = Literal["passed", "failed", "inconclusive"]

# Each request of a recheck; a stream is judged whole, so this bounds a whole stream.
REQUEST_TIMEOUT_S = 60.0

# A unary and a streamed chat that must agree (and a tool-call pair when the worker has a
# tool-call parser), then a tool-call round trip: a few requests, all through the pipeline.
RECHECK_SUITE_TABLE: dict[str, Any] = {
    "name": "recheck",
    "check": [
        {"kind": "consistency", "name": "chat-stream"},
        {
            "kind": "tool_calls",
            "name": "tool-call",
            "requires": "tool_call_parser",
            "cases": "builtin:weather.jsonl",
        },
    ],
}


def recheck_suite() -> Suite:
    """The built-in recheck suite."""
    return suite_from_table(RECHECK_SUITE_TABLE, "the recheck suite", Path.cwd())


@dataclass(frozen=True)
class RecheckResult:
    verdict: Verdict
    duration_s: float
    checks: tuple[CheckResult, ...]
    busy: bool

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [check for check in self.checks if check.outcome == "failed"]

    def why(self) -> str:
        failed = ", ".join(f"{c.name!r} ({c.reason})" for c in self.failed_checks)
        return failed or "every check passed"


@dataclass
class RecheckCounts:
    """What the report says of rechecks so far."""

    interval_s: float
    threshold: int
    passed: int = 0
    failed: int = 0
    inconclusive: int = 0
    consecutive_failures: int = 0
    consecutive_passes: int = 0
    last: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "threshold": self.threshold,
            "passed": self.passed,
            "failed": self.failed,
            "inconclusive": self.inconclusive,
            "consecutive_failures": self.consecutive_failures,
            "consecutive_passes": self.consecutive_passes,
            "last": self.last,
        }


def run_recheck(suite: Suite, settings: Settings, activity: Activity) -> RecheckResult:
    """One recheck; ``busy`` when a user request started or was in flight meanwhile."""
    start = time.monotonic()
    before = activity.mark()
    checks = tuple(run_suite(suite, settings))
    after = activity.mark()
    busy = before[1] > 0 or after[1] > 0 or after[0] != before[0]
    failed = any(check.outcome == "failed" for check in checks)
    verdict: Verdict = "passed" if not failed else "inconclusive" if busy else "failed"
    return RecheckResult(verdict, time.monotonic() - start, checks, busy)


class Rechecker:
    """The recheck thread: waits for the worker to be idle for ``interval_s``, rechecks, and
    hands each decisive result to ``on_result``; stops at :meth:`stop` (bounded join)."""

    def __init__(
        self,
        *,
        interval_s: float,
        suite: Suite,
        settings: Settings,
        activity: Activity,
        on_result: Callable[[RecheckResult], None],
    ) -> None:
        self._interval_s = interval_s
        self._suite = suite
        self._settings = settings
        self._activity = activity
        self._on_result = on_result
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shakedown-recheck", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Start no further recheck (a running one is discarded); returns at once."""
        self._stop.set()

    def join(self, timeout: float) -> bool:
        """Wait for the thread; True when it ended."""
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _wait_until_idle(self) -> bool:
        """Until the worker has been idle for the interval since the last recheck; False when
        stopped first."""
        since = time.monotonic()
        while not self._stop.is_set():
            wait = max(
                self._interval_s - (time.monotonic() - since),
                self._interval_s - self._activity.idle_for(),
            )
            if wait <= 0:
                return True
            self._stop.wait(wait)
        return False

    def _run(self) -> None:
        while self._wait_until_idle():
            try:
                result = run_recheck(self._suite, self._settings, self._activity)
            except Exception:  # the runner never raises for an endpoint's fault: a bug
                logger.exception("worker validation: a recheck crashed; not counted")
                continue
            if self._stop.is_set():
                return  # stopped mid-way: the endpoint may be closing under it
            try:
                self._on_result(result)
            except Exception:
                logger.exception("worker validation: acting on a recheck failed")
