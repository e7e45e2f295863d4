"""WorkerValidation end to end with a real local endpoint stand-in and real gate processes."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openai_standin import StandInEndpoint
from shakedown.validation import ExecGate, ValidationConfig, WorkerValidation, default_gates
from validation_helpers import py


class Card:
    def __init__(self, served_name: str = "standin", reasoning_parser: str | None = None) -> None:
        self.served_name = served_name
        self.reasoning_parser = reasoning_parser
        self.tool_call_parser = None


class Factory:
    """Builds stand-in endpoints the way the real factory builds LoopbackEndpoint."""

    def __init__(self) -> None:
        self.made: list[StandInEndpoint] = []
        self.calls: list[dict[str, Any]] = []

    def __call__(self, card: Any, *, port: int, api_key: str, enable_rl: bool) -> StandInEndpoint:
        self.calls.append({"port": port, "api_key": api_key, "enable_rl": enable_rl})
        endpoint = StandInEndpoint(card.served_name, port=port, api_key=api_key)
        self.made.append(endpoint)
        return endpoint


def shorthand(argv: list[str]) -> str:
    return "exec:" + shlex.join(argv)


def gates_json(*gates: dict[str, Any]) -> str:
    return json.dumps(list(gates))


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[WorkerValidation] = []

    def build(gates: str, **env: str) -> tuple[WorkerValidation, Factory]:
        factory = Factory()
        environ = {"DYN_WORKER_VALIDATION_GATES": gates} | env
        validation = WorkerValidation(
            ValidationConfig.from_env(environ), endpoint_factory=factory, log_dir=tmp_path / "logs"
        )
        made.append(validation)
        return validation, factory

    yield build
    for validation in made:
        validation.close()


def status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_unset_opens_no_listener_and_releases_at_once(make: Any) -> None:
    validation, factory = make("")
    order: list[str] = []
    validation.add_release_hook(lambda: order.append("publish"))
    assert validation.attach(Card(), object()) is None
    assert validation.wait_released(5)
    assert factory.calls == [] and order == ["publish"]
    assert validation.health_ready


def test_release_runs_hooks_then_closes_the_endpoint(make: Any, tmp_path: Path) -> None:
    validation, factory = make(
        shorthand(py("import os; assert os.environ['DYN_VALIDATION_MODEL'] == 'standin'")),
        DYN_WORKER_VALIDATION_REPORT=str(tmp_path / "report.json"),
    )
    order: list[str] = []
    validation.add_release_hook(lambda: order.append("publish card"), name="publish")
    validation.add_release_hook(lambda: order.append("second"))

    async def main() -> None:
        validation.attach(Card(), engine=object())
        await asyncio.wait_for(validation.released(), 10)
        order.append("released() returned")

    asyncio.run(main())
    assert order == ["publish card", "second", "released() returned"]
    assert validation.wait_finished(5) is not None
    assert factory.made[0].stopped and validation.endpoint is None
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "released" and report["gates"][0]["outcome"] == "passed"
    assert (tmp_path / "report.xml").exists()


def test_failure_holds_and_keeps_the_endpoint_up(make: Any, tmp_path: Path) -> None:
    report_path = tmp_path / "r" / "report.json"
    validation, factory = make(
        gates_json(
            {
                "name": "broken-template",
                "exec": py("import sys; print('bad template'); sys.exit(4)"),
            }
        ),
        DYN_WORKER_VALIDATION_REPORT=str(report_path),
    )
    published: list[str] = []
    validation.add_release_hook(lambda: published.append("card"))
    endpoint = validation.attach(Card(), object())
    report = validation.wait_finished(10)
    assert report is not None and report.status == "held"
    assert not validation.is_released and published == []
    assert "broken-template" in report.reason and "exit status 4" in report.reason
    assert not factory.made[0].stopped
    token = factory.calls[0]["api_key"]
    assert status(f"http://127.0.0.1:{endpoint.port}/v1/models", token) == 200
    saved = json.loads(report_path.read_text())
    gate = saved["gates"][0]
    assert (gate["name"], gate["outcome"], gate["exit_code"]) == ("broken-template", "failed", 4)
    assert gate["log_tail"] == "bad template\n" and gate["reason"] == "exit status 4"


def test_no_gates_and_503_before_the_engine_registers(make: Any, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    validation, factory = make(shorthand(py(f"open({str(marker)!r}, 'w').write('x')")))
    endpoint = validation.attach(Card())
    token = factory.calls[0]["api_key"]
    assert status(f"http://127.0.0.1:{endpoint.port}/v1/models", token) == 503
    # Another registration (a LoRA, an admin handler) is not the trigger.
    factory.made[0].registry.register("lora-adapter", object())
    assert validation.wait_finished(0.3) is None
    assert not marker.exists() and validation.state == "waiting"
    validation.register_engine(object())
    assert validation.wait_released(10)
    assert marker.exists()


def test_the_token_is_required(make: Any) -> None:
    # The gate itself proves the endpoint refuses a request without its bearer token.
    code = (
        "import os, urllib.request, urllib.error\n"
        "url = os.environ['OPENAI_BASE_URL'] + '/models'\n"
        "try:\n"
        "    urllib.request.urlopen(url)\n"
        "    raise SystemExit('answered without a token')\n"
        "except urllib.error.HTTPError as e:\n"
        "    assert e.code == 401, e.code\n"
        "req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
        "assert urllib.request.urlopen(req).status == 200\n"
    )
    validation, factory = make(gates_json({"name": "token", "exec": py(code)}))
    validation.attach(Card(), object())
    report = validation.wait_finished(10)
    assert report is not None and report.status == "released", report
    other, other_factory = make("exec:true")
    validation.close()
    other.attach(Card(), object())
    assert other.wait_released(10)
    assert len(factory.calls[0]["api_key"]) >= 32
    assert other_factory.calls[0]["api_key"] != factory.calls[0]["api_key"]


def test_one_endpoint_per_process(make: Any, caplog: pytest.LogCaptureFixture) -> None:
    first, first_factory = make(shorthand(py("import time; time.sleep(0.3)")))
    second, second_factory = make("exec:true")
    assert first.attach(Card(), object()) is not None
    with caplog.at_level(logging.WARNING, logger="shakedown.validation"):
        assert first.attach(Card("lora-adapter"), object()) is None
        assert second.attach(Card("other"), object()) is None
    assert len(first_factory.made) == 1 and second_factory.made == []
    assert "'lora-adapter' gets no local endpoint" in caplog.text
    assert "'other' gets no local endpoint: another validation already claimed" in caplog.text
    assert first.wait_released(10)
    assert second.state == "unattached" and not second.is_released
    assert (
        second.reason
        == "no local endpoint for 'other': the process's one endpoint serves 'standin'"
    )


def test_engine_never_registers_within_the_deadline(make: Any) -> None:
    validation, _ = make("exec:true", DYN_WORKER_VALIDATION_TIMEOUT_S="0.3")
    validation.attach(Card())
    report = validation.wait_finished(5)
    assert report is not None and report.status == "held"
    assert "did not register within the overall deadline" in report.reason


def test_failing_release_hook_holds(make: Any) -> None:
    validation, factory = make("exec:true")

    def publish() -> None:
        raise RuntimeError("discovery is down")

    validation.add_release_hook(publish, name="publish")
    validation.attach(Card(), object())
    report = validation.wait_finished(10)
    assert report is not None and report.status == "held"
    assert "release hook 'publish' failed" in report.reason
    assert not factory.made[0].stopped


def test_close_from_the_loop_does_not_hang_on_a_pending_async_hook(make: Any) -> None:
    validation, _ = make("exec:true")

    async def main() -> None:
        started = asyncio.Event()

        async def publish() -> None:
            started.set()
            await asyncio.sleep(60)

        validation.add_release_hook(publish, name="publish")
        validation.attach(Card(), object())
        await asyncio.wait_for(started.wait(), 10)
        validation.close()  # blocks this loop while joining the validation thread

    asyncio.run(asyncio.wait_for(main(), 10))
    report = validation.report
    assert report is not None and report.status == "held"
    assert "release hook 'publish' failed" in report.reason


def test_async_hook_runs_on_the_loop_it_was_added_from(make: Any) -> None:
    validation, _ = make("exec:true")
    seen: list[object] = []

    async def main() -> None:
        async def publish() -> None:
            seen.append(asyncio.get_running_loop())

        validation.add_release_hook(publish)
        validation.attach(Card(), object())
        await asyncio.wait_for(validation.released(), 10)
        seen.append(asyncio.get_running_loop())

    asyncio.run(main())
    assert len(seen) == 2 and seen[0] is seen[1]


def test_gates_are_told_the_parsers(make: Any, tmp_path: Path) -> None:
    out = tmp_path / "env"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ.get('DYN_VALIDATION_REASONING_PARSER', '-'))"
    validation, _ = make(shorthand(py(code)))
    validation.attach(Card(reasoning_parser="deepseek_r1"), object())
    assert validation.wait_released(10)
    assert out.read_text() == "deepseek_r1"


def test_default_check_runner_gate_end_to_end(make: Any) -> None:
    [gate] = default_gates()
    assert isinstance(gate, ExecGate)
    validation, _ = make(shorthand(list(gate.argv)))
    validation.attach(Card(), object())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "released", report.gates[0].log_tail
    assert "OK: of 9 checks 7 passed, 0 failed, 2 skipped" in report.gates[0].log_tail


def test_a_card_that_may_not_have_an_endpoint_stays_held(tmp_path: Path) -> None:
    def refuse(card: Any, *, port: int, api_key: str, enable_rl: bool) -> None:
        return None  # what the real factory does for a LoRA or a prefill-only worker

    config = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:true"})
    validation = WorkerValidation(config, endpoint_factory=refuse)
    try:
        assert validation.attach(Card("prefill"), object()) is None
        assert not validation.wait_released(0.2)
        assert validation.reason == "'prefill' may not have a local endpoint, so no gate can run"
        # The claim was not taken: an eligible card in another validation still gets one.
        other = WorkerValidation(config, endpoint_factory=Factory())
        try:
            assert other.attach(Card(), object()) is not None
        finally:
            other.close()
    finally:
        validation.close()
