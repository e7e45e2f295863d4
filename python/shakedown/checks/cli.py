"""``shakedown check`` / ``python -m shakedown.checks``: check an OpenAI endpoint, exit 0 or 1.

It reads ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``DYN_VALIDATION_MODEL``, which is exactly
what a validation gate is given, so it works as an exec gate as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from shakedown.validation.report import JUnitCase, junit_xml

from .runner import CheckResult, Settings, run_checks

_MARKS = {"passed": "ok", "failed": "FAIL", "skipped": "skip"}


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
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of the chat checks")
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
    parser.add_argument("--json", type=Path, help="write a JSON report here")
    parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")


def _expect(
    flag: bool | None, environ: Mapping[str, str], expect_var: str, parser_var: str
) -> bool:
    if flag is not None:
        return flag
    explicit = environ.get(expect_var, "").strip().lower()
    if explicit:
        return explicit in ("1", "true", "yes", "on")
    return bool(environ.get(parser_var, "").strip())


def run_from_args(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    environ = os.environ
    base_url = args.base_url or environ.get("OPENAI_BASE_URL", "")
    if not base_url:
        print("shakedown check: set OPENAI_BASE_URL or pass --base-url", file=sys.stderr)
        return 1
    settings = Settings(
        base_url=base_url,
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
    )
    model = repr(settings.model) if settings.model else "the first listed model"
    print(f"shakedown check: {settings.base_url}, {model}", file=out, flush=True)

    def progress(number: int, total: int, result: CheckResult) -> None:
        print(
            f"[{number}/{total}] {result.name:<14} {_MARKS[result.outcome]:<4} "
            f"({result.duration_s * 1000:.0f} ms) {result.reason}",
            file=out,
            flush=True,
        )

    try:
        results = run_checks(settings, progress)
    except ValueError as exc:
        print(f"shakedown check: {exc}", file=sys.stderr)
        return 1
    failed = [r for r in results if r.outcome == "failed"]
    passed = sum(r.outcome == "passed" for r in results)
    skipped = sum(r.outcome == "skipped" for r in results)
    verdict = "FAILED" if failed else "OK"
    print(
        f"{verdict}: of {len(results)} checks {passed} passed, {len(failed)} failed, "
        f"{skipped} skipped",
        file=out,
        flush=True,
    )
    if args.json is not None:
        report = {
            "base_url": settings.base_url,
            "model": settings.model,
            "passed": not failed,
            "checks": [
                {
                    "name": r.name,
                    "outcome": r.outcome,
                    "duration_s": round(r.duration_s, 3),
                    "reason": r.reason,
                }
                for r in results
            ],
        }
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if args.junit is not None:
        cases = [JUnitCase(r.name, r.outcome, r.duration_s, r.reason) for r in results]
        args.junit.write_bytes(junit_xml("shakedown.checks", cases))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shakedown check", description=__doc__)
    _add_arguments(parser)
    return run_from_args(parser.parse_args(argv), out=out)
