"""The gated `shakedown serve` flow: arguments over the environment, exit codes, report."""

from __future__ import annotations

import argparse
import io
import json
import threading
from typing import Any

import pytest

from openai_standin import StandInEndpoint
from shakedown.validation import ExecGate, Hold, ValidationConfigError
from shakedown.validation.serve import add_gate_arguments, run_validated, validation_from_args


class Card:
    served_name = "standin"
    reasoning_parser = None
    tool_call_parser = None


def factory(card: Any, *, port: int, api_key: str, enable_rl: bool) -> StandInEndpoint:
    return StandInEndpoint("standin", port=port, api_key=api_key)


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


def test_passing_flow_prints_the_report_and_exits_0() -> None:
    v = validation_from_args(parse("--gates", "--health-port", "0"), {}, endpoint_factory=factory)
    out = io.StringIO()
    code = run_validated(v, Card(), object(), stop=threading.Event(), health_port=0, out=out)
    text = out.getvalue()
    assert code == 0, text
    assert "worker validation released: all 1 gate(s) passed" in text
    report = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert report["gates"][0]["name"] == "shakedown-check"


def test_failing_flow_stays_held_until_stopped(tmp_path: Any) -> None:
    v = validation_from_args(
        parse("--gates", "exec:false", "--report", str(tmp_path / "r.json")), {},
        endpoint_factory=factory,
    )  # fmt: skip
    stop = threading.Event()
    out = io.StringIO()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(run_validated(v, Card(), object(), stop=stop, out=out))
    )
    thread.start()
    assert v.wait_finished(10) is not None
    assert v.endpoint is not None  # still up while held
    stop.set()
    thread.join(10)
    assert result == [1]
    assert "worker validation held: gate(s) failed: 'false' (exit status 1)" in out.getvalue()
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "held"
