"""`shakedown parity`: send every case to two endpoints and compare what comes back."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from .cases import Case, CaseError, Request, load_cases, requests_for
from .client import Endpoint, FetchError, Response, fetch, parse_endpoint
from .diff import unified
from .normalize import normalized_lines


@dataclass(frozen=True)
class Outcome:
    """One request's comparison: `diff` is empty when both sides match."""

    request: Request
    a: Response | None
    b: Response | None
    diff: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.diff


@dataclass(frozen=True)
class ParityReport:
    outcomes: list[Outcome]
    seconds: float

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and all(o.ok for o in self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


def served_model(endpoint: Endpoint) -> str:
    """The first model `/v1/models` lists."""
    probe = Request(Case(name="models"), "unary", "GET", "/v1/models", {}, None)
    resp = fetch(endpoint, probe)
    try:
        data = json.loads(resp.body)["data"]
        name = data[0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise FetchError(f"{endpoint.url}/v1/models lists no model (HTTP {resp.status})") from None
    if not isinstance(name, str):
        raise FetchError(f"{endpoint.url}/v1/models: model id is not a string")
    return name


def compare(a: Endpoint, b: Endpoint, request: Request) -> Outcome:
    try:
        resp_a = fetch(a, request)
        resp_b = fetch(b, request)
    except FetchError as err:
        return Outcome(request, None, None, "", error=str(err))
    lines_a = normalized_lines(resp_a, request.case.normalize)
    lines_b = normalized_lines(resp_b, request.case.normalize)
    diff = "" if lines_a == lines_b else unified(lines_a, lines_b, f"a {a.url}", f"b {b.url}")
    return Outcome(request, resp_a, resp_b, diff)


def run_parity(
    a: Endpoint,
    b: Endpoint,
    cases: Sequence[Case],
    model: str,
    progress: Callable[[Outcome], None] | None = None,
) -> ParityReport:
    """Every case in every mode, a then b, one at a time (requests are never overlapped)."""
    start = time.monotonic()
    outcomes: list[Outcome] = []
    for case in cases:
        for request in requests_for(case, model):
            outcome = compare(a, b, request)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    return ParityReport(outcomes, time.monotonic() - start)


def print_report(report: ParityReport, out: TextIO) -> None:
    for outcome in report.failures:
        print(f"\n=== MISMATCH {outcome.request.label}", file=out)
        if outcome.error is not None:
            print(f"error: {outcome.error}", file=out)
        else:
            print(outcome.diff, file=out)
    failed = len(report.failures)
    total = len(report.outcomes)
    verdict = "identical" if report.ok else f"{failed} of {total} differ"
    print(
        f"\nparity: {total - failed}/{total} requests identical ({verdict}) "
        f"in {report.seconds:.1f}s",
        file=out,
    )


def add_parity_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Add `parity` to a `shakedown` subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "parity",
        help="compare two OpenAI endpoints request by request",
        description=(
            "Send each case to endpoints A and B, unary and streaming, mask only what must "
            "differ (generated ids, `created`, fields a case names) and compare status, "
            "content-type and the body (every SSE event) byte for byte. Prints a unified "
            "diff per mismatch. Exit code 0 when every response matches, 1 otherwise."
        ),
    )
    parser.add_argument(
        "--a", required=True, metavar="URL", help="endpoint A, http://HOST:PORT[/v1]"
    )
    parser.add_argument(
        "--b", required=True, metavar="URL", help="endpoint B, http://HOST:PORT[/v1]"
    )
    parser.add_argument(
        "--cases", metavar="FILE.jsonl", help="case file (default: the shipped default set)"
    )
    parser.add_argument("--model", help="model name for $MODEL (default: A's first listed model)")
    parser.add_argument("--api-key-a", metavar="KEY", help="bearer token for A")
    parser.add_argument("--api-key-b", metavar="KEY", help="bearer token for B")
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="NAME",
        help="run only cases whose name contains NAME (repeatable)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line per request")
    parser.set_defaults(func=run_parity_command)
    return parser


def run_parity_command(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        a = parse_endpoint(args.a, args.api_key_a)
        b = parse_endpoint(args.b, args.api_key_b)
        cases = load_cases(args.cases)
    except (ValueError, CaseError) as err:
        print(f"shakedown parity: {err}", file=sys.stderr)
        return 1
    if args.case:
        cases = [c for c in cases if any(pattern in c.name for pattern in args.case)]
        if not cases:
            print("shakedown parity: no case matches --case", file=sys.stderr)
            return 1
    try:
        model = args.model or served_model(a)
    except FetchError as err:
        print(f"shakedown parity: {err}", file=sys.stderr)
        return 1

    def progress(outcome: Outcome) -> None:
        if not args.quiet:
            mark = "ok  " if outcome.ok else "DIFF" if outcome.error is None else "ERR "
            print(f"{mark} {outcome.request.label}", file=out, flush=True)

    report = run_parity(a, b, cases, model, progress)
    print_report(report, out)
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`shakedown parity ARGS` on its own (also `python -m shakedown.parity ARGS`)."""
    parser = argparse.ArgumentParser(prog="shakedown")
    sub = add_parity_subcommand(parser.add_subparsers())
    sub.prog = "shakedown parity"
    args = sub.parse_args(sys.argv[1:] if argv is None else list(argv))
    result: int = args.func(args)
    return result
