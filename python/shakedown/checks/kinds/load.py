"""``warmup`` and ``latency``: many requests at a set concurrency.

``warmup`` runs before every other check and counts nothing but errors. ``latency`` streams
its requests and measures time to first token (TTFT), inter-token latency (ITL, the gap
between successive token-bearing chunks) and requests per second, and judges them against
the suite's SLOs; ``min_goodput`` is the share of requests that meet both per-request SLOs.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from ..answers import chat_answer, stream_answer
from ..context import RunContext, run_bounded
from ..results import CheckFailed, Verdict
from ..stats import percentile
from ..suite import CheckSpec

# Latency samples kept in the report (for its histogram), at most.
MAX_SAMPLES = 2000


def prompt_of(tokens: int, number: int) -> str:
    """About ``tokens`` tokens of text, different per request (no shared prefix to cache)."""
    words = " ".join(["sea", "wave", "tide", "shore"] * (max(tokens, 4) // 4))
    return f"Request {number}. Summarise: {words}"


@dataclass(frozen=True)
class WarmupOptions:
    requests: int = 8
    concurrency: int = 2
    prompt_tokens: list[int] = field(default_factory=lambda: [16, 256])
    max_tokens: int = 16
    stream: bool = True
    max_errors: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or self.concurrency < 1 or not self.prompt_tokens:
            raise ValueError("requests and concurrency must be >= 1, prompt_tokens non-empty")


@dataclass(frozen=True)
class LatencyOptions:
    requests: int = 16
    concurrency: int = 1
    prompt_tokens: int = 64
    max_tokens: int = 32
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    min_rps: float | None = None
    # Per-request SLOs for goodput: TTFT and mean ITL of one request.
    slo_ttft_ms: float | None = None
    slo_itl_ms: float | None = None
    min_goodput: float | None = None
    max_errors: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or self.concurrency < 1:
            raise ValueError("requests and concurrency must be >= 1")
        if self.min_goodput is not None and (self.slo_ttft_ms, self.slo_itl_ms) == (None, None):
            raise ValueError("min_goodput needs slo_ttft_ms, slo_itl_ms or both")


def run_warmup(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: WarmupOptions = spec.options
    errors: list[str] = []

    def work(number: int) -> str | None:
        tokens = options.prompt_tokens[number % len(options.prompt_tokens)]
        body = ctx.request(
            spec,
            defaults={"max_tokens": options.max_tokens},
            messages=[{"role": "user", "content": prompt_of(tokens, number)}],
        )
        try:
            chat_answer(ctx.client, body, options.stream, f"warm-up request {number}")
        except (CheckFailed, OSError, ValueError) as exc:
            return str(exc)
        return None

    start = time.monotonic()
    runs = run_bounded(range(options.requests), work, options.concurrency)
    for done, (_, problem) in enumerate(runs, 1):
        if problem:
            errors.append(problem)
        ctx.update(done, options.requests, done - len(errors))
    took = time.monotonic() - start
    metrics = {"requests": options.requests, "errors": len(errors), "seconds": round(took, 3)}
    summary = f"{options.requests} requests at concurrency {options.concurrency} in {took:.1f}s"
    if len(errors) > options.max_errors:
        return Verdict(False, f"{summary}: {len(errors)} failed: {errors[0]}", metrics=metrics)
    return Verdict(True, f"{summary}, {len(errors)} errors", metrics=metrics)


@dataclass
class Timing:
    ttft_s: float
    itls_s: list[float]


def timing(ctx: RunContext, body: dict[str, Any], what: str) -> Timing:
    stream = ctx.client.stream("/chat/completions", body | {"stream": True})
    stream_answer(stream, what)  # judged whole: a malformed stream is an error, not a sample
    times = [
        at
        for chunk, at in zip(stream.chunks, stream.chunk_times)
        if any(_carries_tokens(choice.get("delta") or {}) for choice in chunk.get("choices") or [])
    ]
    if not times:
        raise CheckFailed(f"{what}: the stream carried no tokens")
    return Timing(times[0], [b - a for a, b in itertools.pairwise(times)])


def _carries_tokens(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


def run_latency(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: LatencyOptions = spec.options
    timings: list[Timing] = []
    errors: list[str] = []

    def work(number: int) -> Timing | str:
        body = ctx.request(
            spec,
            defaults={"max_tokens": options.max_tokens},
            messages=[{"role": "user", "content": prompt_of(options.prompt_tokens, number)}],
        )
        try:
            return timing(ctx, body, f"request {number}")
        except (CheckFailed, OSError, ValueError) as exc:
            return str(exc)

    start = time.monotonic()
    for _, outcome in run_bounded(range(options.requests), work, options.concurrency):
        if isinstance(outcome, Timing):
            timings.append(outcome)
        else:
            errors.append(outcome)
        ctx.update(len(timings) + len(errors), options.requests, len(timings))
    wall = time.monotonic() - start
    return judge_latency(options, timings, errors, wall)


def judge_latency(
    options: LatencyOptions, timings: list[Timing], errors: list[str], wall_s: float
) -> Verdict:
    metrics: dict[str, Any] = {"requests": options.requests, "errors": len(errors)}
    if len(errors) > options.max_errors or not timings:
        first = errors[0] if errors else "no request succeeded"
        return Verdict(
            False, f"{len(errors)} of {options.requests} requests failed: {first}", metrics=metrics
        )
    ttft = [t.ttft_s * 1000 for t in timings]
    itl = [gap * 1000 for t in timings for gap in t.itls_s]
    measured = {
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "itl_p50_ms": percentile(itl, 50) if itl else 0.0,
        "itl_p99_ms": percentile(itl, 99) if itl else 0.0,
        "rps": len(timings) / wall_s if wall_s > 0 else float("inf"),
    }
    good = sum(_meets_slo(t, options) for t in timings)
    measured["goodput"] = good / options.requests
    metrics.update({k: round(v, 3) for k, v in measured.items()})
    metrics["samples"] = {"ttft_ms": ttft[:MAX_SAMPLES], "itl_ms": itl[:MAX_SAMPLES]}
    violations = []
    for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"):
        limit = getattr(options, key)
        if limit is not None and measured[key] > limit:
            violations.append(f"{_label(key)} {measured[key]:.1f} ms > {limit:g} ms")
    if options.min_rps is not None and measured["rps"] < options.min_rps:
        violations.append(f"{measured['rps']:.2f} req/s < {options.min_rps:g}")
    if options.min_goodput is not None and measured["goodput"] < options.min_goodput:
        violations.append(f"goodput {measured['goodput']:.0%} < {options.min_goodput:.0%}")
    summary = (
        f"TTFT p50/p99 {measured['ttft_p50_ms']:.1f}/{measured['ttft_p99_ms']:.1f} ms, "
        f"ITL p50/p99 {measured['itl_p50_ms']:.1f}/{measured['itl_p99_ms']:.1f} ms, "
        f"{measured['rps']:.1f} req/s at concurrency {options.concurrency}"
    )
    if options.min_goodput is not None:
        summary += f", goodput {measured['goodput']:.0%}"
    if violations:
        return Verdict(False, f"{'; '.join(violations)} ({summary})", metrics=metrics)
    return Verdict(True, summary, metrics=metrics)


def _meets_slo(t: Timing, options: LatencyOptions) -> bool:
    if options.slo_ttft_ms is not None and t.ttft_s * 1000 > options.slo_ttft_ms:
        return False
    mean_itl = sum(t.itls_s) / len(t.itls_s) * 1000 if t.itls_s else 0.0
    return options.slo_itl_ms is None or mean_itl <= options.slo_itl_ms


def _label(key: str) -> str:
    metric, pct, _ = key.split("_")
    return f"{metric.upper()} {pct}"
