"""Report contents: JSON fields, JUnit XML shape, and the files written."""

from __future__ import annotations

import json
import logging
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shakedown.validation import GateResult, ValidationReport


def report() -> ValidationReport:
    return ValidationReport(
        status="held",
        reason="gate(s) failed: 'checks' (exit status 1)",
        model="m",
        base_url="http://127.0.0.1:5/v1",
        parallel=False,
        started_at=0.0,
        duration_s=1.23456,
        gates=[
            GateResult("sidecar", "url", "passed", 0.5, "HTTP 200", http_status=200),
            GateResult(
                "checks", "exec", "failed", 0.25, "exit status 1", exit_code=1,
                log_tail="stream mismatch\x1b[0m\n", log_path="/tmp/x.log",
            ),
            GateResult("later", "exec", "skipped", 0.0, "not run: gate 'checks' failed"),
        ],
    )  # fmt: skip


def test_json_has_every_field(tmp_path: Path) -> None:
    json_path, xml_path = report().write(tmp_path / "out" / "validation.json")
    data = json.loads(json_path.read_text())
    assert data["status"] == "held" and data["started_at"] == "1970-01-01T00:00:00Z"
    assert data["duration_s"] == 1.235
    failed = data["gates"][1]
    assert failed == {
        "name": "checks", "kind": "exec", "outcome": "failed", "duration_s": 0.25,
        "reason": "exit status 1", "exit_code": 1, "http_status": None,
        "log_tail": "stream mismatch\x1b[0m\n", "log_path": "/tmp/x.log",
    }  # fmt: skip
    assert data["gates"][0]["http_status"] == 200
    assert xml_path == tmp_path / "out" / "validation.xml"


def test_junit_shape() -> None:
    root = ET.fromstring(report().to_junit())
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    failure = cases["checks"].find("failure")
    assert failure is not None and failure.get("message") == "exit status 1"
    out = cases["checks"].find("system-out")
    assert out is not None and out.text == "stream mismatch\ufffd[0m\n"  # control char replaced
    assert cases["later"].find("skipped") is not None
    assert cases["sidecar"].find("failure") is None


def test_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="shakedown.validation"):
        report().log()
    assert "worker validation held: gate(s) failed" in caplog.text
    assert "gate 'checks' failed in 0.25s (exit 1): exit status 1" in caplog.text
    assert "stream mismatch" in caplog.text
