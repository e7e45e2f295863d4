"""The reference check runner against a real local OpenAI-style server, healthy and faulty."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from openai_standin import StandInEndpoint
from shakedown.checks import Settings, run_checks
from shakedown.checks.cli import main
from shakedown.checks.runner import schema_problem
from validation_helpers import RawSidecar, free_port, trickle


def serve(**kwargs: object) -> Iterator[StandInEndpoint]:
    endpoint = StandInEndpoint(registered=True, **kwargs)  # type: ignore[arg-type]
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def healthy() -> Iterator[StandInEndpoint]:
    yield from serve(api_key="tok")


def outcomes(endpoint: StandInEndpoint, **settings: object) -> dict[str, tuple[str, str]]:
    base = {"base_url": endpoint.base_url, "api_key": endpoint.api_key, "model": endpoint.model}
    results = run_checks(Settings(**(base | settings)))  # type: ignore[arg-type]
    return {r.name: (r.outcome, r.reason) for r in results}


def test_healthy_endpoint_passes_every_applicable_check(healthy: StandInEndpoint) -> None:
    got = outcomes(healthy, expect_tools=True)
    assert {name for name, (outcome, _) in got.items() if outcome == "passed"} == {
        "models", "chat", "chat-stream", "tool-call", "completions", "max-tokens",
        "stop-sequence", "bad-input",
    }  # fmt: skip
    assert got["reasoning"][0] == "skipped"
    assert "stopped before" in got["stop-sequence"][1]


def test_reasoning_checked_when_expected() -> None:
    for endpoint in serve(api_key=None, reasoning=True):
        got = outcomes(endpoint, expect_reasoning=True)
        assert got["reasoning"][0] == "passed", got["reasoning"]
        assert got["chat-stream"][0] == "passed", got["chat-stream"]


def test_missing_reasoning_fails_when_expected(healthy: StandInEndpoint) -> None:
    got = outcomes(healthy, expect_reasoning=True)
    assert got["reasoning"][0] == "failed"
    assert "no reasoning_content" in got["reasoning"][1]


@pytest.mark.parametrize(
    ("fault", "check", "words"),
    [
        ("stream_mismatch", "chat-stream", "concatenate"),
        ("no_done", "chat-stream", "[DONE]"),
        ("bad_input_500", "bad-input", "HTTP 500"),
        ("tool_args_invalid", "tool-call", "not valid JSON"),
        ("ignore_stop", "stop-sequence", "stop sequence is in the output"),
        ("ignore_max_tokens", "max-tokens", "not 'length'"),
        ("model_missing", "models", "not listed"),
        ("reasoning_in_content", "reasoning", "no reasoning_content"),
    ],
)
def test_each_fault_is_caught(fault: str, check: str, words: str) -> None:
    for endpoint in serve(api_key=None, reasoning=True, faults=frozenset({fault})):
        got = outcomes(endpoint, expect_tools=True, expect_reasoning=True)
        assert got[check][0] == "failed", got[check]
        assert words in got[check][1]


def test_wrong_token_fails_every_request(healthy: StandInEndpoint) -> None:
    got = outcomes(healthy, api_key="wrong")
    assert got["models"][0] == "failed"
    assert "HTTP 401" in got["models"][1]


def test_unset_model_uses_the_first_listed(healthy: StandInEndpoint) -> None:
    got = outcomes(healthy, model=None)
    assert got["models"] == ("passed", "using the first listed model 'standin'")
    assert got["chat"][0] == "passed"


def test_unreachable_endpoint_fails_not_crashes() -> None:
    # A port just freed has no listener: every check must fail cleanly, none may raise.
    got = outcomes_for_url(f"http://127.0.0.1:{free_port()}/v1")
    assert {outcome for outcome, _ in got.values()} <= {"failed", "skipped"}
    assert "ConnectionRefusedError" in got["models"][1]


def outcomes_for_url(url: str) -> dict[str, tuple[str, str]]:
    results = run_checks(Settings(base_url=url, api_key=None, model="m", timeout_s=2))
    return {r.name: (r.outcome, r.reason) for r in results}


def test_cli_summary_json_and_junit(healthy: StandInEndpoint, tmp_path: Path) -> None:
    json_path, junit_path = tmp_path / "checks.json", tmp_path / "checks.xml"
    parser_args = [
        "--base-url", healthy.base_url, "--api-key", "tok", "--model", "standin",
        "--json", str(json_path), "--junit", str(junit_path),
    ]  # fmt: skip
    out = io.StringIO()
    assert main(parser_args, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("[1/9] models")
    assert lines[-1].startswith("OK: of 9 checks")
    report = json.loads(json_path.read_text())
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]][:3] == ["models", "chat", "chat-stream"]
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "9" and suite.get("failures") == "0"


def test_cli_exit_1_on_failure() -> None:
    for endpoint in serve(api_key=None, faults=frozenset({"no_done"})):
        assert main(["--base-url", endpoint.base_url, "--model", "standin"]) == 1


def test_works_as_an_exec_gate_from_the_environment(healthy: StandInEndpoint) -> None:
    # Exactly what a gate gets: the three variables, nothing on the command line.
    env = {
        **os.environ,
        "OPENAI_BASE_URL": healthy.base_url,
        "OPENAI_API_KEY": "tok",
        "DYN_VALIDATION_MODEL": "standin",
        "DYN_VALIDATION_TOOL_CALL_PARSER": "hermes",
    }
    run = subprocess.run(
        [sys.executable, "-m", "shakedown.checks"],
        env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tool-call      ok" in run.stdout


def test_schema_problem() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
        "additionalProperties": False,
    }
    assert schema_problem({"city": "Paris"}, schema) is None
    assert schema_problem({}, schema) == "$ is missing required 'city'"
    assert schema_problem({"city": 3}, schema) == "$.city should be string, got int"
    assert schema_problem({"city": "x", "unit": "k"}, schema) is not None
    assert schema_problem({"city": "x", "extra": 1}, schema) == "$ has unexpected property 'extra'"


def test_a_trickling_endpoint_fails_each_check_within_its_timeout() -> None:
    # A well-formed answer sent a byte every 50 ms: a timeout per socket read would never fire,
    # the whole-request deadline does.
    answer = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"data":[]}'
    sidecar = RawSidecar(trickle(answer, 0.05))
    try:
        base = f"http://127.0.0.1:{sidecar.port}/v1"
        results = run_checks(Settings(base_url=base, api_key=None, model="m", timeout_s=0.3))
    finally:
        sidecar.stop()
    models = results[0]
    assert (models.name, models.outcome) == ("models", "failed")
    assert models.reason == "request failed: TimeoutError('no complete response within 0.3s')"
