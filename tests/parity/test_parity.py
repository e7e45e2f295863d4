"""shakedown's loopback against the real Dynamo 1.6.1 frontend, case by case, unary and streaming.

Each response pair must be byte-identical once generated ids and `created` are masked.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from shakedown.parity import (
    Case,
    ParityReport,
    load_cases,
    parse_endpoint,
    run_parity,
)

from .conftest import FAILING_MODEL, Dynamo

MODEL = "dsref"
CASES = load_cases()


def _explain(report: ParityReport) -> str:
    parts = []
    for outcome in report.failures:
        parts.append(f"=== {outcome.request.label}\n{outcome.error or outcome.diff}")
    return f"{len(report.failures)} of {len(report.outcomes)} differ\n" + "\n".join(parts)


def _parity(a: str, b: str, cases: list[Case] = CASES) -> ParityReport:
    return run_parity(parse_endpoint(a), parse_endpoint(b), cases, MODEL)


def _assert_identical(report: ParityReport) -> None:
    if not report.ok:
        pytest.fail(_explain(report), pytrace=False)


def test_default_cases_cover_the_surface() -> None:
    names = [c.name for c in CASES]
    assert len(names) >= 30
    kinds = Counter(name.split("-")[0] for name in names)
    assert kinds["chat"] >= 20 and kinds["completions"] >= 3 and kinds["err"] >= 15
    for needed in (
        "chat-text",
        "chat-two-tool-calls",
        "chat-tool-malformed-json",
        "chat-unicode",
        "chat-stop-string",
        "chat-noeos-length",
        "chat-text-usage",
        "completions-usage",
    ):
        assert needed in names
    both = [c for c in CASES if c.modes == ("unary", "stream")]
    assert len(both) >= 30


def test_reference_is_deterministic(dynamo: Dynamo) -> None:
    """Dynamo against itself: only masked fields vary, so the masking is enough."""
    report = _parity(dynamo.base_url, dynamo.base_url)
    _assert_identical(report)


def test_shakedown_mocker_matches_dynamo(dynamo: Dynamo, shakedown_mocker: str) -> None:
    report = _parity(dynamo.base_url, shakedown_mocker)
    _assert_identical(report)


def test_shakedown_via_dynamo_adapter_matches_dynamo(
    dynamo: Dynamo, shakedown_via_dynamo: str
) -> None:
    report = _parity(dynamo.base_url, shakedown_via_dynamo)
    _assert_identical(report)


def test_engine_failures_match(dynamo_failing: str, shakedown_failing: str) -> None:
    """The same failing engine behind both: 500 unary; 200, error event, [DONE] streaming."""
    cases = load_cases(Path(__file__).resolve().parent / "engine_failure_cases.jsonl")
    report = run_parity(
        parse_endpoint(dynamo_failing), parse_endpoint(shakedown_failing), cases, FAILING_MODEL
    )
    _assert_identical(report)
    statuses = {(o.request.case.name, o.request.mode): o.a.status for o in report.outcomes if o.a}
    assert statuses[("engine-fails-mid-content", "unary")] == 500
    assert statuses[("engine-fails-mid-content", "stream")] == 200


def test_tool_parser_off_makes_parity_fail(dynamo: Dynamo, shakedown_no_tool_parser: str) -> None:
    report = _parity(dynamo.base_url, shakedown_no_tool_parser)
    assert not report.ok
    differing = {o.request.case.name for o in report.failures}
    # Every case whose reply is a parsed tool call differs; plain text does not.
    assert {"chat-tool", "chat-two-tool-calls", "chat-content-after-tool-call"} <= differing
    assert "chat-text" not in differing
    tool_diff = next(o.diff for o in report.failures if o.request.case.name == "chat-tool")
    assert "tool_calls" in tool_diff


def test_cli_exit_codes_and_diff(dynamo: Dynamo, shakedown_no_tool_parser: str) -> None:
    cmd = [sys.executable, "-m", "shakedown.parity", "--model", MODEL, "--case", "chat-tool"]
    same = subprocess.run(
        [*cmd, "--a", dynamo.base_url, "--b", f"{dynamo.base_url}/v1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert same.returncode == 0, same.stdout + same.stderr
    assert "requests identical (identical)" in same.stdout
    differ = subprocess.run(
        [*cmd, "--a", dynamo.base_url, "--b", shakedown_no_tool_parser, "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert "=== MISMATCH chat-tool [unary]" in differ.stdout
    assert '-        "tool_calls": [' in differ.stdout


def test_cli_rejects_a_bad_case_file(tmp_path: Path) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"name": "x", "body": {}, "modes": ["sideways"]}\n')
    out = subprocess.run(
        [sys.executable, "-m", "shakedown.parity", "--a", "http://127.0.0.1:9", "--b",
         "http://127.0.0.1:9", "--cases", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert f"{bad}:1: `modes` must be" in out.stderr


@pytest.mark.parametrize("mode", ["unary", "stream"])
def test_shakedown_matches_dynamo_on_a_user_case(
    dynamo: Dynamo, shakedown_mocker: str, tmp_path: Path, mode: str
) -> None:
    """A case file written by hand, with a `normalize` path, works end to end."""
    case = tmp_path / "mine.jsonl"
    case.write_text(
        '{"name": "mine", "body": {"model": "$MODEL", "messages": [{"role": "user", '
        '"content": "Yo"}], "max_tokens": 64, "nvext": {"annotations": '
        '["output_replay_id:conv:1"]}}, "modes": ["' + mode + '"], '
        '"normalize": ["usage.prompt_tokens"]}\n'
    )
    report = _parity(dynamo.base_url, shakedown_mocker, load_cases(case))
    _assert_identical(report)
    assert len(report.outcomes) == 1
