"""The default suite (the nine checks every worker gets) against the real loopback endpoint:
the tiny model through shakedown's mocker, scripted, random, or behind a proxy that breaks
one thing; and `shakedown check` as a command and as an exec gate."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from check_endpoints import FaultProxy, loopback, random_tokens, scripted, settings
from shakedown.checks import Settings, run_checks
from shakedown.checks.cli import main
from validation_helpers import RawSidecar, free_port, trickle

DEFAULT_CHECKS = [
    "models", "chat", "chat-stream", "reasoning", "tool-call", "completions", "max-tokens",
    "stop-sequence", "bad-input",
]  # fmt: skip


def outcomes(url: str, **fields: Any) -> dict[str, tuple[str, str]]:
    return {r.name: (r.outcome, r.reason) for r in run_checks(settings(url, **fields))}


@pytest.fixture(scope="module")
def tiny_url() -> Any:
    with loopback() as endpoint:
        yield endpoint.base_url


def test_the_tiny_worker_passes_all_nine_every_time(tiny_url: str) -> None:
    for _ in range(20):
        got = outcomes(tiny_url, expect_tools=True, expect_reasoning=True)
        assert list(got) == DEFAULT_CHECKS
        assert {name for name, (outcome, _) in got.items() if outcome == "passed"} == set(got), got
    assert "structurally equal" in got["chat-stream"][1]
    assert "calls ['get_weather']" in got["chat-stream"][1]


def test_without_parsers_reasoning_and_tools_are_skipped(tiny_url: str) -> None:
    got = outcomes(tiny_url)
    assert got["reasoning"][0] == got["tool-call"][0] == "skipped"
    assert "DYN_VALIDATION_EXPECT_TOOLS" in got["tool-call"][1]
    assert all(outcome == "passed" for name, (outcome, _) in got.items() if name not in (
        "reasoning", "tool-call"))  # fmt: skip


def test_random_tokens_pass_every_time() -> None:
    # The flaky verdict: the mocker answers random tokens, different on every request, so a
    # streamed answer never equals the unary one and a stop word picked from one answer is
    # not in the next. Neither may fail a healthy worker.
    with loopback(random_tokens) as endpoint:
        for _ in range(20):
            got = outcomes(endpoint.base_url, expect_reasoning=True)
            assert {o for o, _ in got.values()} == {"passed", "skipped"}, got
            assert got["tool-call"][0] == "skipped"


def test_deterministic_suite_compares_bytes_and_catches_random_answers() -> None:
    # Said to be deterministic, the same engine fails: byte equality is only asked for then.
    with loopback(random_tokens) as endpoint:
        got = outcomes(endpoint.base_url, deterministic=True)
    assert got["chat-stream"][0] == "failed"
    assert "reasoning_content streamed" in got["chat-stream"][1]


def test_deterministic_stop_cut_is_exact(tiny_url: str) -> None:
    got = outcomes(tiny_url, deterministic=True, expect_reasoning=True, expect_tools=True)
    assert got["stop-sequence"][0] == "passed"
    assert got["stop-sequence"][1].startswith("stopped before '")
    assert "byte-equal" in got["chat-stream"][1]


@pytest.mark.parametrize(
    ("fault", "failed"),
    [
        # A tool-call parser broken in the stream path: the stream's calls leak as content.
        (
            "leak_tool_calls",
            {
                "chat-stream": "the stream called [], the unary answer ['get_weather']",
                "tool-call": "stream: no tool call; content 'Let me check that for you.<tool_call>",
            },
        ),
        (
            "truncate_arguments",
            {
                "chat-stream": "stream: get_weather: arguments are not valid JSON",
                "tool-call": "stream: get_weather: arguments are not valid JSON",
            },
        ),
        (
            "no_done",
            {
                check: "did not end with 'data: [DONE]'"
                for check in ("chat-stream", "reasoning", "tool-call", "stop-sequence")
            },
        ),
        ("bad_input_500", {"bad-input": "HTTP 500, want 4xx"}),
        ("ignore_stop", {"stop-sequence": "stop='e' is in the content"}),
        ("ignore_max_tokens", {"max-tokens": "max_tokens=3 but"}),
        ("model_missing", {"models": "model 'tiny' is not listed"}),
    ],
)
def test_each_frontend_fault_fails_its_checks(
    tiny_url: str, fault: str, failed: dict[str, str]
) -> None:
    with FaultProxy(tiny_url, fault) as proxy:
        got = outcomes(proxy.base_url, expect_tools=True, expect_reasoning=True)
    assert {name for name, (outcome, _) in got.items() if outcome == "failed"} == set(failed), got
    for name, words in failed.items():
        assert words in got[name][1], got[name]


def test_reasoning_markup_in_content_fails_the_reasoning_check() -> None:
    # No reasoning parser on the card: the model's <think> block stays in content.
    with loopback(reasoning_parser=None) as endpoint:
        got = outcomes(endpoint.base_url, expect_reasoning=True, expect_tools=True)
    assert got["reasoning"][0] == "failed"
    assert "'<think>' leaked into content" in got["reasoning"][1]


def test_invalid_tool_arguments_fail_the_tool_check() -> None:
    bad = '<think>x</think><tool_call>{"name": "get_weather", "arguments": {"city": 7}}</tool_call><EOS>'
    with loopback(scripted({"tool": [bad]})) as endpoint:
        got = outcomes(endpoint.base_url, expect_tools=True)
    assert got["tool-call"][0] == "failed"
    assert "$.city should be string, got integer" in got["tool-call"][1]
    # the consistency check judges the same arguments against the tool's schema
    assert got["chat-stream"][0] == "failed"


def test_an_answer_that_reaches_no_stop_string_is_inconclusive_not_failed() -> None:
    # Random-length answers without 'e' or '。' prove nothing about stop strings.
    with loopback(scripted({"tool": ["<think>Ok.</think>Hi, I am OK.<EOS>"]})) as endpoint:
        got = outcomes(endpoint.base_url, max_tokens=3)
    assert got["stop-sequence"][0] == "skipped"
    assert "no answer reached any of the stop strings" in got["stop-sequence"][1]


def test_wrong_token_fails_every_request() -> None:
    with loopback(api_key="tok") as endpoint:
        got = outcomes(endpoint.base_url, api_key="wrong")
        assert got["models"][0] == "failed" and "HTTP 401" in got["models"][1]
        assert outcomes(endpoint.base_url, api_key="tok")["chat"][0] == "passed"


def test_unset_model_uses_the_first_listed(tiny_url: str) -> None:
    got = outcomes(tiny_url, model=None)
    assert got["models"] == ("passed", "using the first listed model 'tiny'")
    assert got["chat"][0] == "passed"


def test_unreachable_endpoint_fails_not_crashes() -> None:
    # A port just freed has no listener: every check must fail cleanly, none may raise.
    got = outcomes(f"http://127.0.0.1:{free_port()}/v1", timeout_s=2)
    assert {outcome for outcome, _ in got.values()} <= {"failed", "skipped"}
    assert "ConnectionRefusedError" in got["models"][1]


def test_cli_lines_table_json_junit_html(tiny_url: str, tmp_path: Path) -> None:
    paths = {kind: tmp_path / f"checks.{kind}" for kind in ("json", "xml", "html")}
    argv = [
        "--base-url", tiny_url, "--model", "tiny", "--expect-tools",
        "--json", str(paths["json"]), "--junit", str(paths["xml"]), "--html", str(paths["html"]),
    ]  # fmt: skip
    out = io.StringIO()
    assert main(argv, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("suite 'default'")
    assert lines[1].startswith("[1/9] models")
    assert lines[-1] == "OK: of 9 checks 8 passed, 0 failed, 1 skipped"
    table = lines[lines.index(next(x for x in lines if x.startswith("check "))) :]
    assert [row.split()[0] for row in table[2:-1]] == DEFAULT_CHECKS
    report = json.loads(paths["json"].read_text())
    assert report["passed"] is True and report["suite"] == "default"
    assert [c["name"] for c in report["checks"]] == DEFAULT_CHECKS
    assert report["checks"][4]["cases"] == [
        {"name": "weather", "outcome": "passed", "duration_s": report["checks"][4]["cases"][0][
            "duration_s"], "reason": "1/1 rows passed"}
    ]  # fmt: skip
    suite = ET.parse(paths["xml"]).getroot().find("testsuite")
    assert suite is not None
    names = [case.get("name") for case in suite.iter("testcase")]
    # a testcase per check, and per case group inside one (chat-stream's pairs, tool groups)
    assert names == [
        "models", "chat", "chat-stream", "chat-stream[chat]", "chat-stream[tools]", "reasoning",
        "tool-call", "tool-call[weather]", "completions", "max-tokens", "stop-sequence",
        "bad-input",
    ]  # fmt: skip
    assert suite.get("failures") == "0" and suite.get("skipped") == "1"
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "OK: of 9 checks" in page


def test_cli_exit_1_and_the_failure_in_every_report(tiny_url: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    html = tmp_path / "r.html"
    with FaultProxy(tiny_url, "bad_input_500") as proxy:
        out = io.StringIO()
        code = main(
            ["--base-url", proxy.base_url, "--json", str(report), "--html", str(html)], out=out
        )
    assert code == 1
    assert out.getvalue().splitlines()[-1].startswith("FAILED: of 9 checks")
    failed = [c for c in json.loads(report.read_text())["checks"] if c["outcome"] == "failed"]
    assert [c["name"] for c in failed] == ["bad-input"]
    assert "HTTP 500" in html.read_text()


def test_bad_suite_file_is_an_error_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"check": [{"kind": "latency", "requets": 3}]}))
    assert main(["--base-url", "http://127.0.0.1:9/v1", "--suite", str(suite)]) == 1
    assert "unknown key(s) requets" in capsys.readouterr().err


def test_works_as_an_exec_gate_from_the_environment(tiny_url: str) -> None:
    # Exactly what a gate gets: the three variables and the card's parsers, no arguments.
    env = {
        **os.environ,
        "OPENAI_BASE_URL": tiny_url,
        "DYN_VALIDATION_MODEL": "tiny",
        "DYN_VALIDATION_TOOL_CALL_PARSER": "hermes",
        "DYN_VALIDATION_REASONING_PARSER": "deepseek_r1",
    }
    env.pop("OPENAI_API_KEY", None)
    run = subprocess.run(
        [sys.executable, "-m", "shakedown.checks"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tool-call      ok" in run.stdout and "reasoning      ok" in run.stdout
    assert run.stdout.splitlines()[-1] == "OK: of 9 checks 9 passed, 0 failed, 0 skipped"


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
