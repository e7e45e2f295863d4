"""Issue 5 §7 end to end: a Dynamo worker held by shakedown's validation, checked through the
loopback driving the worker over Dynamo's request plane, and published to the real Dynamo
frontend only when its gate passes."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from . import stack
from .conftest import Dynamo

HERE = Path(__file__).resolve().parent


def _listed(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=5) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


def _start(
    dynamo: Dynamo, model_dir: Path, work_dir: Path, name: str, gate: list[str]
) -> stack.Proc:
    report = work_dir / f"{name}-report.json"
    gates = json.dumps([{"name": "chat", "exec": gate, "timeout_s": 30}])
    env = {
        **dynamo.env,
        "DYN_WORKER_VALIDATION_GATES": gates,
        "DYN_WORKER_VALIDATION_REPORT": str(report),
    }
    boot = (
        "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
        "sys.argv[0] = sys.argv[1]; del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    argv = [sys.executable, "-c", boot, dynamo.site, str(HERE / "validated_worker.py"),
            str(model_dir), name]  # fmt: skip
    proc = stack.spawn(name, argv, env, work_dir / "logs")
    proc.extra["report"] = str(report)
    return proc


def _wait(predicate: object, timeout_s: float, proc: stack.Proc) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        if not proc.alive():
            pytest.fail(f"{proc.name} exited:\n{proc.log_tail()}")
        time.sleep(0.2)
    return False


def test_passing_gate_publishes_the_worker(dynamo: Dynamo, model_dir: Path, work_dir: Path) -> None:
    name = "gated-pass"
    proc = _start(dynamo, model_dir, work_dir, name, [sys.executable, str(HERE / "gate_check.py")])
    try:
        assert _wait(lambda: name in _listed(dynamo.base_url), 60, proc), proc.log_tail()
        assert "RELEASED" in proc.log.read_text()
        report = json.loads(Path(proc.extra["report"]).read_text())
        assert report["status"] == "released"
        assert [g["outcome"] for g in report["gates"]] == ["passed"]
        body = json.dumps(
            {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
        ).encode()
        request = urllib.request.Request(
            f"{dynamo.base_url}/v1/chat/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            message = json.loads(resp.read())["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("a", "First turn.")
    finally:
        proc.stop()


def test_failing_gate_keeps_the_worker_out_of_discovery(
    dynamo: Dynamo, model_dir: Path, work_dir: Path
) -> None:
    name = "gated-fail"
    gate = [sys.executable, str(HERE / "gate_check.py"), "--expect", "something else"]
    proc = _start(dynamo, model_dir, work_dir, name, gate)
    report = Path(proc.extra["report"])
    try:
        assert _wait(report.is_file, 60, proc), proc.log_tail()
        time.sleep(2.0)  # a published card would be listed well within this
        assert name not in _listed(dynamo.base_url)
        assert "RELEASED" not in proc.log.read_text()
        data = json.loads(report.read_text())
        assert data["status"] == "held"
        assert data["gates"][0]["outcome"] == "failed" and data["gates"][0]["exit_code"] == 1
    finally:
        proc.stop()
