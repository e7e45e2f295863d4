"""``accuracy``: the model answers a small dataset well enough, judged statistically.

Dataset rows (JSONL): ``{"prompt": "..."}`` or ``{"messages": [...]}``, the ``answer``, and
optionally ``matcher`` (``exact``, ``regex``, ``number``, ``choice``), ``choices``,
``tolerance``, ``name`` and ``group``.

The check passes when the one-sided Wilson lower bound of the pass rate, at ``confidence``,
reaches ``min_pass_rate`` over the whole dataset. A fixed pass-rate cut flakes on a small
dataset; the bound says "we are confident the true rate is at least this". Rows stop being
sent as soon as the remaining ones can no longer change the verdict (``early_stop``), so
stopping early never changes an outcome.

With ``reference`` (a pinned endpoint known to be good) the dataset runs there first and the
threshold becomes the reference's pass rate minus ``max_drop`` (or ``min_pass_rate`` if higher).
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..answers import ok_json, unary_answer
from ..client import Client
from ..context import RunContext, run_bounded
from ..options import SuiteError, coerce, parse_options
from ..results import CaseResult, CheckFailed, Verdict
from ..stats import Decision, z_one_sided
from ..suite import CheckSpec, Suite, read_cases

Matcher = Literal["exact", "regex", "number", "choice"]
ROW_KEYS = {
    "prompt",
    "messages",
    "answer",
    "matcher",
    "choices",
    "tolerance",
    "name",
    "group",
    "_line",
}
DEFAULT_CHOICES = ["A", "B", "C", "D"]
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Reference:
    base_url: str
    model: str | None = None
    # The name of an environment variable holding the reference's bearer token.
    api_key_env: str | None = None
    max_drop: float = 0.05


@dataclass(frozen=True)
class Options:
    dataset: str
    min_pass_rate: float | None = None
    confidence: float = 0.95
    matcher: Matcher = "exact"
    case_sensitive: bool = False
    tolerance: float = 1e-6
    concurrency: int = 4
    max_tokens: int | None = None
    early_stop: bool = True
    reference: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.min_pass_rate is None and self.reference is None:
            raise ValueError("set min_pass_rate, a reference endpoint, or both")
        if self.min_pass_rate is not None and not 0 < self.min_pass_rate <= 1:
            raise ValueError(f"min_pass_rate must be in (0, 1], got {self.min_pass_rate}")
        z_one_sided(self.confidence)
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")


@dataclass(frozen=True)
class Row:
    name: str
    group: str
    messages: list[dict[str, Any]]
    answer: Any
    matcher: Matcher
    choices: list[str]
    tolerance: float


def parse(table: dict[str, Any], where: str) -> Options:
    options = parse_options(Options, table, where)
    if options.reference is not None:
        parse_options(Reference, options.reference, f"{where}: reference")
    return options


def load_rows(suite: Suite, spec: CheckSpec, where: str) -> list[Row]:
    options: Options = spec.options
    group = Path(options.dataset.removeprefix("builtin:")).stem
    return [
        _row(raw, f"{where}: {options.dataset}:{raw['_line']}", options, group)
        for raw in read_cases(suite, options.dataset, where)
    ]


def _row(raw: dict[str, Any], where: str, options: Options, group: str) -> Row:
    unknown = sorted(set(raw) - ROW_KEYS)
    if unknown:
        raise SuiteError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if "answer" not in raw:
        raise SuiteError(f"{where}: no 'answer'")
    if isinstance(raw.get("prompt"), str):
        messages = [{"role": "user", "content": raw["prompt"]}]
    elif isinstance(raw.get("messages"), list) and raw["messages"]:
        messages = raw["messages"]
    else:
        raise SuiteError(f"{where}: a row needs 'prompt' (a string) or 'messages' (a list)")
    matcher = coerce(raw.get("matcher", options.matcher), Matcher, f"{where}: matcher")
    if matcher == "regex":
        try:
            re.compile(str(raw["answer"]))
        except re.error as exc:
            raise SuiteError(f"{where}: answer is not a regular expression: {exc}") from None
    if matcher == "number":
        _number_answer(raw["answer"], where)
    choices = coerce(raw.get("choices", DEFAULT_CHOICES), list[str], f"{where}: choices")
    return Row(
        name=str(raw.get("name") or f"line {raw['_line']}"),
        group=str(raw.get("group") or group),
        messages=messages,
        answer=raw["answer"],
        matcher=matcher,
        choices=choices,
        tolerance=coerce(raw.get("tolerance", options.tolerance), float, f"{where}: tolerance"),
    )


def _number_answer(value: Any, where: str) -> float:
    try:
        number = float(str(value).replace(",", ""))
    except ValueError:
        raise SuiteError(f"{where}: the answer {value!r} is not a number") from None
    if not math.isfinite(number):
        raise SuiteError(f"{where}: the answer {value!r} is not a finite number")
    return number


def matches(row: Row, text: str, case_sensitive: bool) -> bool:
    """Whether the answer ``text`` is right for ``row``."""
    if row.matcher == "exact":
        expected, given = str(row.answer).strip().rstrip("."), text.strip().rstrip(".")
        return expected == given if case_sensitive else expected.casefold() == given.casefold()
    if row.matcher == "regex":
        flags = 0 if case_sensitive else re.IGNORECASE
        return re.search(str(row.answer), text, flags) is not None
    if row.matcher == "number":
        found = _NUMBER.findall(text)
        if not found:
            return False
        try:
            number = float(found[-1].replace(",", ""))
        except ValueError:
            return False
        target = float(str(row.answer).replace(",", ""))
        return abs(number - target) <= row.tolerance * max(1.0, abs(target))
    # choice: the last option the answer names, as a word of its own
    pattern = r"(?<![\w])(" + "|".join(map(re.escape, row.choices)) + r")(?![\w])"
    named = re.findall(pattern, text)
    return bool(named) and named[-1] == str(row.answer)


def ask(
    client: Client, model: str, body: dict[str, Any], row: Row, case_sensitive: bool
) -> str | None:
    """None when ``row`` is answered right, else what came back."""
    what = f"{row.name}"
    answer = unary_answer(
        ok_json(client.post("/chat/completions", body | {"model": model}), what), what
    )
    if matches(row, answer.content, case_sensitive):
        return None
    return f"answered {answer.content.strip()[-80:]!r}, want {row.matcher} {row.answer!r}"


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    rows = load_rows(ctx.suite, spec, spec.name)
    bodies = {
        id(row): ctx.request(
            spec,
            defaults={"max_tokens": options.max_tokens or ctx.max_tokens},
            messages=row.messages,
        )
        for row in rows
    }
    metrics: dict[str, Any] = {"total": len(rows), "confidence": options.confidence}
    threshold = options.min_pass_rate or 0.0
    note = ""
    if options.reference is not None:
        reference = parse_options(Reference, options.reference, f"{spec.name}: reference")
        rate = reference_rate(ctx, reference, rows, bodies, options)
        metrics["reference_rate"] = rate
        threshold = max(threshold, rate - reference.max_drop)
        note = f" (reference {rate:.0%} - {reference.max_drop:.0%})"
    metrics["threshold"] = threshold

    results: list[tuple[Row, str | None, float]] = []

    def decision() -> Decision:
        passed = sum(problem is None for _, problem, _ in results)
        return Decision(passed, len(results), len(rows), threshold, options.confidence)

    def work(row: Row) -> tuple[str | None, float]:
        start = time.monotonic()
        try:
            problem = ask(ctx.client, ctx.model, bodies[id(row)], row, options.case_sensitive)
        except (CheckFailed, OSError, ValueError) as exc:
            problem = f"request failed: {exc}"
        return problem, time.monotonic() - start

    def decided() -> bool:
        return options.early_stop and decision().verdict is not None

    for row, (problem, took) in run_bounded(rows, work, options.concurrency, decided):
        results.append((row, problem, took))
        ctx.update(len(results), len(rows), decision().passed)
    # Rows finish in any order; report them in the dataset's, so groups and misses are stable.
    position = {id(row): index for index, row in enumerate(rows)}
    results.sort(key=lambda result: position[id(result[0])])
    final = decision()
    passed_verdict = bool(final.verdict)
    rate = final.passed / final.done if final.done else 0.0
    metrics.update(passed=final.passed, done=final.done, rate=rate)
    metrics["final_lower"] = final.final_lower(0)
    bound = f"{threshold:.2f}{note} at {options.confidence:.0%}"
    if final.done == 0:
        best = final.final_lower(len(rows))
        summary = (
            f"cannot pass: even {len(rows)}/{len(rows)} right bounds the rate at {best:.2f} < "
            f"{bound}; add rows or lower the threshold"
        )
        return Verdict(False, summary, (), metrics)
    stopped = (
        "" if final.done == len(rows) else f", stopped after {final.done} of {len(rows)}: decided"
    )
    summary = (
        f"{final.passed}/{final.done} right ({rate:.0%}){stopped}; Wilson lower bound over the "
        f"dataset {'>=' if passed_verdict else '<'} {bound}"
    )
    if not passed_verdict:
        summary += f" (it is at most {final.final_lower(len(rows) - final.done):.2f})"
        misses = [f"{row.name}: {problem}" for row, problem, _ in results if problem]
        summary += "; misses: " + "; ".join(misses[:3])
    return Verdict(passed_verdict, summary, _groups(results, threshold), metrics)


def reference_rate(
    ctx: RunContext,
    reference: Reference,
    rows: list[Row],
    bodies: dict[int, dict[str, Any]],
    options: Options,
) -> float:
    api_key = os.environ.get(reference.api_key_env) if reference.api_key_env else None
    client = Client(reference.base_url, api_key, ctx.settings.timeout_s)
    model = reference.model
    if model is None:
        listed = ok_json(client.get("/models"), "reference GET /models").get("data") or []
        if not listed:
            raise CheckFailed("the reference endpoint lists no model")
        model = str(listed[0].get("id"))

    def work(row: Row) -> str | None:
        try:
            return ask(client, model, bodies[id(row)], row, options.case_sensitive)
        except (CheckFailed, OSError, ValueError) as exc:
            return f"request failed: {exc}"

    answers = [problem for _, problem in run_bounded(rows, work, options.concurrency)]
    failed_requests = [p for p in answers if p and p.startswith("request failed")]
    if failed_requests:
        raise CheckFailed(f"the reference endpoint failed: {failed_requests[0]}")
    return sum(problem is None for problem in answers) / len(rows)


def _groups(
    results: list[tuple[Row, str | None, float]], threshold: float
) -> tuple[CaseResult, ...]:
    """A testcase per row group; a group is judged by its plain rate (it is a breakdown:
    the check's verdict is the statistical one over the whole dataset)."""
    groups: dict[str, list[tuple[str | None, float]]] = {}
    for row, problem, took in results:
        groups.setdefault(row.group, []).append((problem, took))
    cases = []
    for group, rows in groups.items():
        passed = sum(p is None for p, _ in rows)
        cases.append(
            CaseResult(
                group,
                "passed" if passed / len(rows) >= threshold else "failed",
                sum(t for _, t in rows),
                f"{passed}/{len(rows)} right",
            )
        )
    return tuple(cases)
