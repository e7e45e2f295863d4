"""The gated `shakedown serve` flow against the production loopback endpoint serving the
packaged tiny model through the mocker engine: arguments over the environment, exit codes,
report."""

from __future__ import annotations

import argparse
import io
import json
import threading
from pathlib import Path

import pytest

from shakedown.endpoint import Engine
from shakedown.validation import ExecGate, Hold, ValidationConfigError
from shakedown.validation.serve import add_gate_arguments, run_validated, validation_from_args
from validation_helpers import Factory, chat_status, listening, tiny_card, tiny_engine


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
    code = run_validated(v, tiny_card(), engine, stop=threading.Event(), health_port=0, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "worker validation released: all 1 gate(s) passed" in text
    report = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert report["gates"][0]["name"] == "shakedown-check"
    # The check runner really ran against the served model, then the endpoint closed.
    assert "OK: of 9 checks 9 passed" in report["gates"][0]["log_tail"]
    [endpoint] = factory.made
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
