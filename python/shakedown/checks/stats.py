"""Statistics the checks judge by: the Wilson score bound of a pass rate, and percentiles."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist


def z_one_sided(confidence: float) -> float:
    """The normal quantile for a one-sided bound at ``confidence`` (0.95 -> 1.645)."""
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    return NormalDist().inv_cdf(confidence)


def wilson_bounds(passed: int, total: int, confidence: float) -> tuple[float, float]:
    """One-sided Wilson score bounds (lower, upper) of a pass rate at ``confidence``.

    Each is a one-sided bound: the true rate is above ``lower`` (and, separately, below
    ``upper``) with probability ``confidence``. With no trials the rate is unknown: (0, 1).
    """
    if not 0 <= passed <= total:
        raise ValueError(f"passed must be in 0..total, got {passed} of {total}")
    if total == 0:
        return 0.0, 1.0
    z = z_one_sided(confidence)
    rate = passed / total
    z2n = z * z / total
    centre = rate + z2n / 2
    spread = z * math.sqrt(rate * (1 - rate) / total + z2n / (4 * total))
    scale = 1 + z2n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


@dataclass(frozen=True)
class Decision:
    """Where a pass-rate test stands after ``done`` of ``total`` rows, ``passed`` of them."""

    passed: int
    done: int
    total: int
    threshold: float
    confidence: float

    @property
    def lower(self) -> float:
        """The Wilson lower bound over the rows run so far."""
        return wilson_bounds(self.passed, self.done, self.confidence)[0]

    def final_lower(self, more_passes: int) -> float:
        """The lower bound over all rows if ``more_passes`` of the remaining rows pass."""
        return wilson_bounds(self.passed + more_passes, self.total, self.confidence)[0]

    @property
    def verdict(self) -> bool | None:
        """True or False once no remaining row can change the verdict over the full set,
        None while it can. The verdict is "Wilson lower bound over all rows >= threshold",
        so stopping early when it is decided changes no outcome (no optional stopping)."""
        remaining = self.total - self.done
        if self.final_lower(0) >= self.threshold:
            return True
        if self.final_lower(remaining) < self.threshold:
            return False
        return None


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
