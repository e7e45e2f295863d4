"""The gated `shakedown serve` flow against the production loopback endpoint serving the
packaged tiny model through the mocker engine: arguments over the environment, exit codes,
report."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shakedown.endpoint import Engine, build_pipeline
from shakedown.validation import ExecGate, Hold, ValidationConfigError
from shakedown.validation.serve import add_gate_arguments, run_validated, validation_from_args
from validation_helpers import (
    Factory,
    RawSidecar,
    chat_status,
    listening,
    never_answer,
    py,
    tiny_card,
    tiny_engine,
    wait_for_file,
)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return tiny_engine()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_gate_arguments(parser)
    return parser.parse_args(argv)


def test_arguments_override_the_environment() -> None:
    env = {"DYN_WORKER_VALIDATION_GATES": "exec:false", "DYN_WORKER_VALIDATION_HOLD": "card"}
    v = validation_from_args(parse("--gates", "exec:true", "--hold", "health"), env)
    assert v.config.gates == (ExecGate("true", ("true",)),) and v.config.hold is Hold.HEALTH
    assert validation_from_args(parse(), env).config.gates == (ExecGate("false", ("false",)),)
    bare = validation_from_args(parse("--gates"), {}).config.gates
    assert [g.name for g in bare] == ["shakedown-check"]
    with pytest.raises(ValidationConfigError):
        validation_from_args(parse("--gates", "nonsense"), {})


def test_passing_flow_prints_the_report_and_exits_0(engine: Engine) -> None:
    factory = Factory()
    v = validation_from_args(parse("--gates", "--health-port", "0"), {}, endpoint_factory=factory)
    out = io.StringIO()
    pipeline = build_pipeline(tiny_card())
    code = run_validated(
        v, tiny_card(), engine, stop=threading.Event(), pipeline=pipeline, health_port=0, out=out
    )
    text = out.getvalue()
    assert code == 0, text
    assert "worker validation released: all 1 gate(s) passed" in text
    report = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert report["gates"][0]["name"] == "shakedown-check"
    # The check runner really ran against the served model, then the endpoint closed.
    assert "OK: of 9 checks 9 passed" in report["gates"][0]["log_tail"]
    [endpoint] = factory.made
    assert factory.calls[0]["pipeline"] is pipeline  # the worker's, not a second one
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{endpoint.port}/v1" in text
    assert not listening(endpoint.port)


def test_failing_flow_stays_held_until_stopped(engine: Engine, tmp_path: Path) -> None:
    factory = Factory()
    v = validation_from_args(
        parse("--gates", "exec:false", "--report", str(tmp_path / "r.json")), {},
        endpoint_factory=factory,
    )  # fmt: skip
    stop = threading.Event()
    out = io.StringIO()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(run_validated(v, tiny_card(), engine, stop=stop, out=out))
    )
    thread.start()
    assert v.wait_finished(10) is not None
    # Still up while held: the endpoint serves the model through the engine.
    [endpoint] = factory.made
    assert chat_status(endpoint.port, factory.calls[0]["api_key"]) == 200
    stop.set()
    thread.join(10)
    assert result == [1]
    assert "worker validation held: gate(s) failed: 'false' (exit status 1)" in out.getvalue()
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "held"
    assert not listening(endpoint.port)


@pytest.mark.parametrize("stuck", ["url", "exec"])
def test_sigterm_stops_serve_while_a_gate_is_stuck(tmp_path: Path, stuck: str) -> None:
    """A real `shakedown serve` process, its gate stuck on a silent sidecar (or sleeping):
    SIGTERM ends it, held, long before the gate's own 600 s deadline."""
    sidecar = RawSidecar(never_answer)
    started = tmp_path / "started"
    gate = (
        f"url:{sidecar.url}"
        if stuck == "url"
        else "exec:" + shlex.join(py(f"open({str(started)!r}, 'w').write('x'); "
                                     "import time; time.sleep(600)"))
    )  # fmt: skip
    report = tmp_path / "report.json"
    with (tmp_path / "stderr").open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shakedown", "serve", "--gates", gate, "--report", str(report)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("OPENAI_BASE_URL="), (tmp_path / "stderr").read_text()
        if stuck == "url":
            assert sidecar.request_seen.wait(30)
        else:
            wait_for_file(started, 30)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sidecar.stop()
    assert code == 1
    saved = json.loads(report.read_text())
    assert saved["status"] == "held"
    assert [(g["outcome"], g["reason"]) for g in saved["gates"]] == [
        ("failed", "validation was stopped")
    ]
