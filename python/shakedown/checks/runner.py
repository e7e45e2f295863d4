"""Running a suite against an endpoint: warm-up first, then each check in order.

A check ends passed, failed or skipped; nothing a check or the endpoint does ends the run
early or raises out of it (a bug in a check fails that check, never passes it).
"""

from __future__ import annotations

import http.client
import logging
import time
from typing import Any

from .client import Client
from .context import RunContext, Settings
from .kinds import KINDS
from .results import CaseResult, CheckFailed, CheckResult, CheckSkipped, Outcome
from .suite import CheckSpec, Suite, default_suite

log = logging.getLogger("shakedown.checks")

UNMET = {
    "reasoning_parser": "no reasoning parser set (DYN_VALIDATION_EXPECT_REASONING=1 to check)",
    "tool_call_parser": "no tool-call parser set (DYN_VALIDATION_EXPECT_TOOLS=1 to check)",
}


class Progress:
    """Receives a run's events as they happen; this one ignores them."""

    def started(self, number: int, total: int, spec: CheckSpec) -> None:
        pass

    def cases(self, done: int, total: int, passed: int) -> None:
        pass

    def finished(self, number: int, total: int, result: CheckResult) -> None:
        pass


def ordered(suite: Suite) -> list[CheckSpec]:
    """Warm-up checks first (they exist to run before anything is measured), then the rest."""
    return sorted(suite.checks, key=lambda check: check.kind != "warmup")


def run_suite(
    suite: Suite, settings: Settings, progress: Progress | None = None
) -> list[CheckResult]:
    progress = progress or Progress()
    ctx = RunContext(
        client=Client(settings.base_url, settings.api_key, settings.timeout_s),
        settings=settings,
        suite=suite,
    )
    ctx.update = progress.cases
    checks = ordered(suite)
    results = []
    for number, spec in enumerate(checks, 1):
        progress.started(number, len(checks), spec)
        result = run_check(ctx, spec)
        results.append(result)
        progress.finished(number, len(checks), result)
    return results


def run_check(ctx: RunContext, spec: CheckSpec) -> CheckResult:
    start = time.monotonic()
    outcome: Outcome
    cases: tuple[CaseResult, ...] = ()
    metrics: dict[str, Any] = {}
    if spec.requires is not None and not ctx.expects(spec.requires):
        return CheckResult(spec.name, "skipped", 0.0, UNMET[spec.requires], spec.kind)
    try:
        verdict = KINDS[spec.kind].run(ctx, spec)
        outcome = "passed" if verdict.passed else "failed"
        reason, cases, metrics = verdict.reason, verdict.cases, verdict.metrics
    except CheckFailed as exc:
        outcome, reason = "failed", str(exc)
    except CheckSkipped as exc:
        outcome, reason = "skipped", str(exc)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # Connection errors and timeouts are the endpoint failing the check, not a crash.
        outcome, reason = "failed", f"request failed: {exc!r}"
    except Exception as exc:
        log.exception("check %r crashed", spec.name)
        outcome, reason = "failed", f"the check itself crashed (a shakedown bug): {exc!r}"
    return CheckResult(
        spec.name, outcome, time.monotonic() - start, reason, spec.kind, cases, metrics
    )


def run_checks(settings: Settings, progress: Progress | None = None) -> list[CheckResult]:
    """The default suite: the nine checks every worker gets."""
    return run_suite(default_suite(), settings, progress)
