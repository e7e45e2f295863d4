"""``shakedown check`` / ``python -m shakedown.checks``: check an OpenAI endpoint, exit 0 or 1.

It reads ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``DYN_VALIDATION_MODEL``, which is exactly
what a validation gate is given, so it works as an exec gate as it is. Without ``--suite`` it
runs the default suite (nine checks); ``--suite FILE`` runs a TOML (Python 3.11+) or JSON suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from . import report
from .attach import AttachError, find
from .context import Settings
from .options import SuiteError
from .runner import run_suite
from .suite import default_suite, load_suite


def add_check_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``check`` to a CLI's subparsers; the parsed namespace's ``func`` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="check an OpenAI-compatible endpoint (the default validation gate)",
        description=__doc__,
    )
    _add_arguments(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", help="endpoint base URL (default: $OPENAI_BASE_URL)")
    parser.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY)")
    parser.add_argument(
        "--model", help="model to check (default: $DYN_VALIDATION_MODEL, else the first listed)"
    )
    parser.add_argument(
        "--suite", type=Path, help="a suite file, TOML or JSON (default: the nine built-in checks)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument(
        "--max-tokens", type=int, help="max_tokens of the chat checks (default: the suite's, 64)"
    )
    parser.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the engine answers a request the same every time: compare stream and unary "
        "byte for byte (default: the suite's setting, off)",
    )
    parser.add_argument(
        "--expect-reasoning",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="require reasoning_content (default: $DYN_VALIDATION_EXPECT_REASONING, or on when "
        "$DYN_VALIDATION_REASONING_PARSER is set)",
    )
    parser.add_argument(
        "--expect-tools",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the tool-call round trip (default: $DYN_VALIDATION_EXPECT_TOOLS, or on when "
        "$DYN_VALIDATION_TOOL_CALL_PARSER is set)",
    )
    parser.add_argument(
        "--attach",
        nargs="?",
        type=int,
        const=0,
        metavar="PID",
        help="check a held worker's loopback endpoint in this pod, found from the record it "
        "leaves (token read from its 0600 file); PID picks a worker (default: the latest)",
    )
    parser.add_argument("--json", type=Path, help="write a JSON report here")
    parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")
    parser.add_argument("--html", type=Path, help="write a one-page HTML report here")


def _expect(
    flag: bool | None, environ: Mapping[str, str], expect_var: str, parser_var: str
) -> bool:
    if flag is not None:
        return flag
    explicit = environ.get(expect_var, "").strip().lower()
    if explicit:
        return explicit in ("1", "true", "yes", "on")
    return bool(environ.get(parser_var, "").strip())


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    return Settings(
        base_url=args.base_url or environ.get("OPENAI_BASE_URL", ""),
        api_key=args.api_key or environ.get("OPENAI_API_KEY") or None,
        model=args.model or environ.get("DYN_VALIDATION_MODEL") or None,
        timeout_s=args.timeout,
        max_tokens=args.max_tokens,
        expect_reasoning=_expect(
            args.expect_reasoning,
            environ,
            "DYN_VALIDATION_EXPECT_REASONING",
            "DYN_VALIDATION_REASONING_PARSER",
        ),
        expect_tools=_expect(
            args.expect_tools,
            environ,
            "DYN_VALIDATION_EXPECT_TOOLS",
            "DYN_VALIDATION_TOOL_CALL_PARSER",
        ),
        deterministic=args.deterministic,
    )


def attached(args: argparse.Namespace, environ: Mapping[str, str]) -> Mapping[str, str]:
    """``environ`` as a gate of the held worker would see it (``--attach``)."""
    record, token = find(args.attach or None)
    seen = {
        **environ,
        "OPENAI_BASE_URL": record.base_url,
        "OPENAI_API_KEY": token,
        "DYN_VALIDATION_MODEL": record.model,
    }
    for var, value in (
        ("DYN_VALIDATION_REASONING_PARSER", record.reasoning_parser),
        ("DYN_VALIDATION_TOOL_CALL_PARSER", record.tool_call_parser),
    ):
        if value:
            seen[var] = value
    return seen


def run_from_args(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    environ: Mapping[str, str] = os.environ
    if args.attach is not None:
        try:
            environ = attached(args, environ)
        except AttachError as exc:
            print(f"shakedown check: {exc}", file=sys.stderr)
            return 1
    settings = settings_from_args(args, environ)
    if not settings.base_url:
        print("shakedown check: set OPENAI_BASE_URL or pass --base-url", file=sys.stderr)
        return 1
    try:
        suite = default_suite() if args.suite is None else load_suite(args.suite)
    except SuiteError as exc:
        print(f"shakedown check: {exc}", file=sys.stderr)
        return 1
    model = repr(settings.model) if settings.model else "the first listed model"
    print(
        f"shakedown check: {settings.base_url}, {model}, suite {suite.name!r}", file=out, flush=True
    )
    started, clock = time.time(), time.monotonic()
    try:
        results = run_suite(suite, settings, report.LineProgress(out, live=out.isatty()))
    except ValueError as exc:  # a base URL the client cannot use
        print(f"shakedown check: {exc}", file=sys.stderr)
        return 1
    info = report.RunInfo(
        settings.base_url, settings.model, suite.name, started, time.monotonic() - clock
    )
    print(report.table(results), file=out)
    print(report.summary_line(results), file=out, flush=True)
    if args.json is not None:
        args.json.write_bytes(report.to_json(info, results))
    if args.junit is not None:
        args.junit.write_bytes(report.to_junit(results))
    if args.html is not None:
        args.html.write_text(report.to_html(info, results), encoding="utf-8")
    return 1 if any(r.outcome == "failed" for r in results) else 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shakedown check", description=__doc__)
    _add_arguments(parser)
    return run_from_args(parser.parse_args(argv), out=out)
