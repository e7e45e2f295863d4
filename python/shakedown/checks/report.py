"""A check run's results for people (progress lines, a table, a one-page HTML report) and for
tools (JSON, JUnit XML with a testcase per check and per case group)."""

from __future__ import annotations

import html
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from shakedown.validation.report import JUnitCase, junit_xml

from .results import CheckResult
from .runner import Progress
from .suite import CheckSpec

MARKS = {"passed": "ok", "failed": "FAIL", "skipped": "skip"}


@dataclass(frozen=True)
class RunInfo:
    base_url: str
    model: str | None
    suite: str
    started_at: float
    duration_s: float


def check_line(number: int, total: int, result: CheckResult) -> str:
    return (
        f"[{number}/{total}] {result.name:<14} {MARKS[result.outcome]:<4} "
        f"({result.duration_s * 1000:.0f} ms) {result.reason}"
    )


def summary_line(results: Sequence[CheckResult]) -> str:
    failed = sum(r.outcome == "failed" for r in results)
    passed = sum(r.outcome == "passed" for r in results)
    skipped = sum(r.outcome == "skipped" for r in results)
    verdict = "FAILED" if failed else "OK"
    return (
        f"{verdict}: of {len(results)} checks {passed} passed, {failed} failed, {skipped} skipped"
    )


class LineProgress(Progress):
    """One line per check as it ends; on a terminal, a live line while it runs (count,
    elapsed time, pass rate so far) that the final line replaces."""

    def __init__(self, out: TextIO, live: bool) -> None:
        self.out = out
        self.live = live
        self._label = ""
        self._start = 0.0

    def started(self, number: int, total: int, spec: CheckSpec) -> None:
        self._label = f"[{number}/{total}] {spec.name:<14}"
        self._start = time.monotonic()
        if self.live:
            self._write(f"{self._label} ...")

    def cases(self, done: int, total: int, passed: int) -> None:
        if self.live:
            elapsed = time.monotonic() - self._start
            self._write(
                f"{self._label} {done}/{total} in {elapsed:.1f}s, "
                f"{passed}/{done} passed ({passed / done:.0%})"
            )

    def finished(self, number: int, total: int, result: CheckResult) -> None:
        line = check_line(number, total, result)
        if self.live:
            width = shutil.get_terminal_size().columns
            self.out.write("\r\x1b[K" + line[: max(width - 1, 20)] + "\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def _write(self, text: str) -> None:
        width = shutil.get_terminal_size().columns
        self.out.write("\r\x1b[K" + text[: max(width - 1, 20)])
        self.out.flush()


def table(results: Sequence[CheckResult]) -> str:
    """The results as a fixed-width table, one row per check."""
    rows = [("check", "kind", "result", "cases", "time", "why")]
    for r in results:
        passed = sum(c.outcome == "passed" for c in r.cases)
        cases = f"{passed}/{len(r.cases)}" if r.cases else "-"
        why = r.reason if len(r.reason) <= 70 else r.reason[:67] + "..."
        rows.append((r.name, r.kind, MARKS[r.outcome], cases, f"{r.duration_s:.2f}s", why))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[5]
        )
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 3)
    return "\n".join(line.rstrip() for line in lines)


def to_dict(info: RunInfo, results: Sequence[CheckResult]) -> dict[str, Any]:
    return {
        "base_url": info.base_url,
        "model": info.model,
        "suite": info.suite,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.started_at)),
        "duration_s": round(info.duration_s, 3),
        "passed": not any(r.outcome == "failed" for r in results),
        "checks": [
            {
                "name": r.name,
                "kind": r.kind,
                "outcome": r.outcome,
                "duration_s": round(r.duration_s, 3),
                "reason": r.reason,
                "cases": [
                    {
                        "name": c.name,
                        "outcome": c.outcome,
                        "duration_s": round(c.duration_s, 3),
                        "reason": c.reason,
                    }
                    for c in r.cases
                ],
                "metrics": r.metrics,
            }
            for r in results
        ],
    }


def to_json(info: RunInfo, results: Sequence[CheckResult]) -> bytes:
    return orjson.dumps(to_dict(info, results), option=orjson.OPT_INDENT_2)


def to_junit(results: Sequence[CheckResult]) -> bytes:
    """A testcase per check, and one per case group inside it (``check[group]``)."""
    cases = []
    for r in results:
        cases.append(JUnitCase(r.name, r.outcome, r.duration_s, r.reason))
        if len(r.cases) > 1 or (r.cases and r.cases[0].name != r.name and r.kind != "conformance"):
            cases.extend(
                JUnitCase(f"{r.name}[{c.name}]", c.outcome, c.duration_s, c.reason) for c in r.cases
            )
    return junit_xml("shakedown.checks", cases)


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#222}
h1{font-size:1.4em}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
.passed{color:#17692b}.failed{color:#b00020;font-weight:600}.skipped{color:#777}
.cases td{font-size:.9em}.why{white-space:pre-wrap;word-break:break-word}
svg{background:#fafafa;border:1px solid #eee;margin:.3em 0}
"""


def to_html(info: RunInfo, results: Sequence[CheckResult]) -> str:
    """One self-contained page: the verdict, a row per check with its cases and failure
    inline, and a histogram of every latency sample."""
    e = html.escape
    verdict = summary_line(results)
    rows = []
    for r in results:
        rows.append(
            f'<tr><td>{e(r.name)}</td><td>{e(r.kind)}</td><td class="{r.outcome}">'
            f'{MARKS[r.outcome]}</td><td>{r.duration_s:.2f}s</td><td class="why">'
            f"{e(r.reason)}</td></tr>"
        )
        for c in r.cases if len(r.cases) > 1 or r.outcome == "failed" else ():
            rows.append(
                f'<tr class="cases"><td></td><td>{e(c.name)}</td><td class="{c.outcome}">'
                f'{MARKS[c.outcome]}</td><td>{c.duration_s:.2f}s</td><td class="why">'
                f"{e(c.reason)}</td></tr>"
            )
        samples = r.metrics.get("samples") if isinstance(r.metrics, dict) else None
        if isinstance(samples, dict):
            charts = "".join(
                f"<div>{e(label)} ({len(values)} samples)<br>{histogram(values)}</div>"
                for label, values in samples.items()
                if values
            )
            rows.append(f'<tr><td></td><td colspan="4">{charts}</td></tr>')
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        f"<title>shakedown check: {e(verdict)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>shakedown check — {e(verdict)}</h1>"
        f"<p>{e(info.base_url)}, model {e(str(info.model))}, suite {e(info.suite)}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(info.started_at))}, "
        f"{info.duration_s:.1f}s</p>"
        "<table><tr><th>check</th><th>kind</th><th>result</th><th>time</th><th>why</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )


def histogram(values: Sequence[float], bins: int = 24, width: int = 480, height: int = 90) -> str:
    """An inline SVG histogram of ``values`` with its range labelled."""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / span * bins), bins - 1)] += 1
    top = max(counts)
    bar = width / bins
    bars = "".join(
        f'<rect x="{i * bar:.1f}" y="{height - 14 - count / top * (height - 20):.1f}" '
        f'width="{bar - 1:.1f}" height="{count / top * (height - 20):.1f}" fill="#4a7bd0">'
        f"<title>{count}</title></rect>"
        for i, count in enumerate(counts)
        if count
    )
    labels = (
        f'<text x="0" y="{height - 2}" font-size="10">{low:.1f} ms</text>'
        f'<text x="{width}" y="{height - 2}" font-size="10" text-anchor="end">{high:.1f} ms</text>'
    )
    return f'<svg width="{width}" height="{height}" role="img">{bars}{labels}</svg>'
