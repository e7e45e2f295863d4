"""What a check run produces, and the two ways a check stops short."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["passed", "failed", "skipped"]


class CheckFailed(Exception):
    """The endpoint answered wrongly; the message says how."""


class CheckSkipped(Exception):
    """The check does not apply to this endpoint (or depends on one that failed)."""


@dataclass(frozen=True)
class CaseResult:
    """One testcase inside a check: a conformance item or a case-file row group."""

    name: str
    outcome: Outcome
    duration_s: float
    reason: str


@dataclass(frozen=True)
class Verdict:
    """What a check returns: passed or not, why, and what it measured."""

    passed: bool
    reason: str
    cases: tuple[CaseResult, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_cases(cls, cases: list[CaseResult], prefix: str = "") -> Verdict:
        """Passed when no case failed; the reason lists the failures, else every case."""
        failed = [c for c in cases if c.outcome == "failed"]
        if failed:
            return cls(False, "; ".join(c.reason for c in failed), tuple(cases))
        return cls(True, prefix + "; ".join(c.reason for c in cases), tuple(cases))


@dataclass(frozen=True)
class CheckResult:
    name: str
    outcome: Outcome
    duration_s: float
    reason: str
    kind: str = ""
    cases: tuple[CaseResult, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)
