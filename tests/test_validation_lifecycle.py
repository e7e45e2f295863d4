"""WorkerValidation end to end: the production loopback endpoint serving the packaged tiny
model through the mocker engine, and real gate processes."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shakedown.endpoint
from shakedown._core import Pipeline
from shakedown.cli import TINY_MODEL
from shakedown.endpoint import Engine, EngineRegistry
from shakedown.validation import ExecGate, ValidationConfig, WorkerValidation, default_gates
from validation_helpers import (
    SERVED,
    Factory,
    Sidecar,
    chat_status,
    listening,
    py,
    status,
    tiny_card,
    tiny_engine,
)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return tiny_engine()


def shorthand(argv: list[str]) -> str:
    return "exec:" + shlex.join(argv)


def gates_json(*gates: dict[str, Any]) -> str:
    return json.dumps(list(gates))


@pytest.fixture(params=["0", "1"], ids=["sequential", "parallel"])
def make(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """Builds validations from the environment, in order and (DYN_WORKER_VALIDATION_PARALLEL)
    all at once: every lifecycle test runs in both modes."""
    made: list[WorkerValidation] = []

    def build(gates: str, **env: str) -> tuple[WorkerValidation, Factory]:
        factory = Factory()
        environ = {
            "DYN_WORKER_VALIDATION_GATES": gates,
            "DYN_WORKER_VALIDATION_PARALLEL": request.param,
        } | env
        validation = WorkerValidation(
            ValidationConfig.from_env(environ), endpoint_factory=factory, log_dir=tmp_path / "logs"
        )
        made.append(validation)
        return validation, factory

    yield build
    for validation in made:
        validation.close()


def test_unset_opens_no_listener_and_releases_at_once(make: Any, engine: Engine) -> None:
    validation, factory = make("")
    order: list[str] = []
    validation.add_release_hook(lambda: order.append("publish"))
    assert validation.attach(tiny_card(), engine) is None
    assert validation.wait_released(5)
    assert factory.calls == [] and order == ["publish"]
    assert validation.health_ready


def test_release_runs_hooks_then_closes_the_endpoint(
    make: Any, engine: Engine, tmp_path: Path
) -> None:
    # The gate proves the real endpoint serves the tiny model while the worker is held.
    code = (
        "import json, os, urllib.request\n"
        f"assert os.environ['DYN_VALIDATION_MODEL'] == {SERVED!r}\n"
        "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/models', "
        "headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
        "ids = [m['id'] for m in json.load(urllib.request.urlopen(req))['data']]\n"
        f"assert ids == [{SERVED!r}], ids\n"
    )
    validation, factory = make(
        shorthand(py(code)), DYN_WORKER_VALIDATION_REPORT=str(tmp_path / "report.json")
    )
    order: list[str] = []
    validation.add_release_hook(lambda: order.append("publish card"), name="publish")
    validation.add_release_hook(lambda: order.append("second"))

    async def main() -> int:
        endpoint = validation.attach(tiny_card(), engine=engine)
        assert endpoint is not None
        await asyncio.wait_for(validation.released(), 10)
        order.append("released() returned")
        return endpoint.port

    port = asyncio.run(main())
    assert order == ["publish card", "second", "released() returned"]
    report = validation.wait_finished(5)
    assert report is not None and report.gates[0].outcome == "passed", report.gates[0].log_tail
    assert validation.endpoint is None and not listening(port)
    assert factory.calls[0]["port"] == 0 and factory.calls[0]["enable_rl"] is False
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["status"] == "released" and saved["gates"][0]["outcome"] == "passed"
    assert saved["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert (tmp_path / "report.xml").exists()


def test_failure_holds_and_keeps_the_endpoint_up(make: Any, engine: Engine, tmp_path: Path) -> None:
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
    endpoint = validation.attach(tiny_card(), engine)
    report = validation.wait_finished(10)
    assert report is not None and report.status == "held"
    assert not validation.is_released and published == []
    assert "broken-template" in report.reason and "exit status 4" in report.reason
    # Still up for debugging: it answers, and still serves the model through the engine.
    token = factory.calls[0]["api_key"]
    assert validation.endpoint is endpoint is factory.made[0]
    assert status(f"http://127.0.0.1:{endpoint.port}/v1/models", token) == 200
    assert chat_status(endpoint.port, token) == 200
    saved = json.loads(report_path.read_text())
    gate = saved["gates"][0]
    assert (gate["name"], gate["outcome"], gate["exit_code"]) == ("broken-template", "failed", 4)
    assert gate["log_tail"] == "bad template\n" and gate["reason"] == "exit status 4"


def test_no_gates_and_503_before_the_engine_registers(
    make: Any, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registries: list[EngineRegistry] = []

    class SeenRegistry(EngineRegistry):
        """The real registry, kept where the test can reach the one the endpoint reads."""

        def __init__(self) -> None:
            super().__init__()
            registries.append(self)

    monkeypatch.setattr(shakedown.endpoint, "EngineRegistry", SeenRegistry)
    marker = tmp_path / "ran"
    validation, factory = make(shorthand(py(f"open({str(marker)!r}, 'w').write('x')")))
    endpoint = validation.attach(tiny_card())
    token = factory.calls[0]["api_key"]
    assert chat_status(endpoint.port, token) == 503
    # Another registration (a LoRA, an admin handler) is not the trigger.
    [registry] = registries
    registry.register("dynamo.lora.generate", engine)
    assert validation.wait_finished(0.3) is None
    assert not marker.exists() and validation.state == "waiting"
    assert chat_status(endpoint.port, token) == 503
    validation.register_engine(engine)
    assert chat_status(endpoint.port, token) == 200
    assert validation.wait_released(10)
    assert marker.exists()


def test_the_token_is_required(make: Any, engine: Engine) -> None:
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
    validation.attach(tiny_card(), engine)
    report = validation.wait_finished(10)
    assert report is not None and report.status == "released", report.gates[0].log_tail
    other, other_factory = make("exec:true")
    validation.close()
    other.attach(tiny_card(), engine)
    assert other.wait_released(10)
    assert len(factory.calls[0]["api_key"]) >= 32
    assert other_factory.calls[0]["api_key"] != factory.calls[0]["api_key"]


def test_one_endpoint_per_process(
    make: Any, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    first, first_factory = make(shorthand(py("import time; time.sleep(0.3)")))
    second, second_factory = make("exec:true")
    assert first.attach(tiny_card(), engine) is not None
    with caplog.at_level(logging.WARNING, logger="shakedown.validation"):
        assert first.attach(tiny_card("lora-adapter", lora="adapter"), engine) is None
        assert second.attach(tiny_card("other"), engine) is None
    assert len(first_factory.made) == 1 and second_factory.calls == []
    assert "'lora-adapter' gets no local endpoint" in caplog.text
    assert "'other' gets no local endpoint: another validation already claimed" in caplog.text
    assert first.wait_released(10)
    assert second.state == "unattached" and not second.is_released
    assert second.reason == (
        f"no local endpoint for 'other': the process's one endpoint serves {SERVED!r}"
    )


def test_engine_never_registers_within_the_deadline(make: Any) -> None:
    validation, _ = make("exec:true", DYN_WORKER_VALIDATION_TIMEOUT_S="0.3")
    validation.attach(tiny_card())
    report = validation.wait_finished(5)
    assert report is not None and report.status == "held"
    assert "did not register within the overall deadline" in report.reason


def test_failing_release_hook_holds(make: Any, engine: Engine) -> None:
    validation, factory = make("exec:true")

    def publish() -> None:
        raise RuntimeError("discovery is down")

    validation.add_release_hook(publish, name="publish")
    endpoint = validation.attach(tiny_card(), engine)
    report = validation.wait_finished(10)
    assert report is not None and report.status == "held"
    assert "release hook 'publish' failed" in report.reason
    assert chat_status(endpoint.port, factory.calls[0]["api_key"]) == 200


def test_close_from_the_loop_does_not_hang_on_a_pending_async_hook(
    make: Any, engine: Engine
) -> None:
    validation, _ = make("exec:true")

    async def main() -> int:
        started = asyncio.Event()

        async def publish() -> None:
            started.set()
            await asyncio.sleep(60)

        validation.add_release_hook(publish, name="publish")
        endpoint = validation.attach(tiny_card(), engine)
        await asyncio.wait_for(started.wait(), 10)
        validation.close()  # blocks this loop while joining the validation thread
        return endpoint.port

    port = asyncio.run(asyncio.wait_for(main(), 10))
    report = validation.report
    assert report is not None and report.status == "held"
    assert "release hook 'publish' failed" in report.reason
    assert not listening(port)


def test_async_hook_runs_on_the_loop_it_was_added_from(make: Any, engine: Engine) -> None:
    validation, _ = make("exec:true")
    seen: list[object] = []

    async def main() -> None:
        async def publish() -> None:
            seen.append(asyncio.get_running_loop())

        validation.add_release_hook(publish)
        validation.attach(tiny_card(), engine)
        await asyncio.wait_for(validation.released(), 10)
        seen.append(asyncio.get_running_loop())

    asyncio.run(main())
    assert len(seen) == 2 and seen[0] is seen[1]


def test_gates_are_told_the_parsers(make: Any, engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "env"
    code = (
        "import os\n"
        "names = [os.environ.get(k, '-') for k in "
        "('DYN_VALIDATION_REASONING_PARSER', 'DYN_VALIDATION_TOOL_CALL_PARSER')]\n"
        f"open({str(out)!r}, 'w').write(' '.join(names))\n"
    )
    validation, _ = make(shorthand(py(code)))
    validation.attach(tiny_card(), engine)
    assert validation.wait_released(10)
    assert out.read_text() == "deepseek_r1 hermes"


def test_default_check_runner_gate_end_to_end(make: Any, engine: Engine) -> None:
    [gate] = default_gates()
    assert isinstance(gate, ExecGate)
    validation, _ = make(shorthand(list(gate.argv)))
    validation.attach(tiny_card(), engine)
    report = validation.wait_finished(20)
    assert report is not None and report.status == "released", report.gates[0].log_tail
    log_tail = report.gates[0].log_tail
    # The gate is told the card's parsers, so the reasoning and tool-call checks run too.
    assert "OK: of 9 checks 9 passed, 0 failed, 0 skipped" in log_tail, log_tail
    assert "reasoning      ok" in log_tail and "tool-call      ok" in log_tail


def test_a_card_that_may_not_have_an_endpoint_stays_held(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    config = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:true"})
    refused = Factory()
    validation = WorkerValidation(config, endpoint_factory=refused)
    try:
        with caplog.at_level(logging.WARNING, logger="shakedown.validation"):
            card = tiny_card("prefill", worker_type="prefill")
            assert validation.attach(card, engine) is None
        assert "no local endpoint for 'prefill': it is a prefill-only worker" in caplog.text
        assert len(refused.calls) == 1 and refused.made == []
        assert not validation.wait_released(0.2)
        assert validation.reason == "'prefill' may not have a local endpoint, so no gate can run"
        # The claim was not taken: an eligible card in another validation still gets one.
        other = WorkerValidation(config, endpoint_factory=Factory())
        try:
            assert other.attach(tiny_card(), engine) is not None
        finally:
            other.close()
    finally:
        validation.close()


def test_an_unwritable_report_directory_with_a_failing_gate_holds(
    make: Any, engine: Engine, tmp_path: Path
) -> None:
    # The report (and the gate logs beside it) cannot be written: a regular file stands where
    # their directory should be. (Tests may run as root, which a read-only mode would not stop.)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    sidecar = Sidecar()
    validation, _ = make(
        gates_json({"name": "ok", "url": sidecar.url, "timeout_s": 10},
                   {"name": "fails", "exec": py("raise SystemExit(1)")}),
        DYN_WORKER_VALIDATION_REPORT=str(blocker / "report.json"),
    )  # fmt: skip
    validation._log_dir = None  # logs beside the report, as a worker configured so would have
    published: list[str] = []
    validation.add_release_hook(lambda: published.append("card"))
    validation.attach(tiny_card(), engine)
    report = validation.wait_finished(20)
    sidecar.stop()
    assert report is not None and report.status == "held", report
    assert not validation.is_released and published == []
    assert [g.outcome for g in report.gates] == ["passed", "failed"]
    assert "NotADirectoryError" in report.gates[1].reason


def test_report_files_are_private_and_a_symlink_there_is_replaced(
    make: Any, engine: Engine, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    report_path = tmp_path / "out" / "report.json"
    report_path.parent.mkdir()
    report_path.symlink_to(victim)
    validation, _ = make("exec:true", DYN_WORKER_VALIDATION_REPORT=str(report_path))
    validation._log_dir = None
    validation.attach(tiny_card(), engine)
    assert validation.wait_released(20)
    assert validation.wait_finished(5) is not None
    assert victim.read_text() == "precious" and not report_path.is_symlink()
    assert json.loads(report_path.read_text())["status"] == "released"
    for path in (report_path, report_path.with_suffix(".xml")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    logs = tmp_path / "out" / "report-logs"
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert [p.name for p in logs.iterdir()] == ["01-true.log"]


def test_a_temporary_log_directory_is_removed_when_validation_ends(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    config = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:echo hello"})
    validation = WorkerValidation(config, endpoint_factory=Factory())
    try:
        validation.attach(tiny_card(), engine)
        report = validation.wait_finished(20)
    finally:
        validation.close()
    assert report is not None and report.status == "released"
    assert report.gates[0].log_tail == "hello\n" and report.gates[0].log_path is None
    assert list(temp.iterdir()) == []


def test_a_local_port_in_use_names_the_port(make: Any, engine: Engine) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        validation, _ = make("exec:true", DYN_WORKER_VALIDATION_LOCAL_PORT=str(port))
        with pytest.raises(
            OSError, match=f"127.0.0.1:{port} \\(set by DYN_WORKER_VALIDATION_LOCAL_PORT\\)"
        ):
            validation.attach(tiny_card(), engine)
    report = validation.wait_finished(5)
    assert report is not None and report.status == "held" and str(port) in report.reason


def test_the_endpoint_serves_through_the_pipeline_the_worker_built(
    make: Any, engine: Engine
) -> None:
    pipeline = Pipeline(str(TINY_MODEL), served_name=SERVED, reasoning_parser="deepseek_r1",
                        tool_call_parser="hermes")  # fmt: skip
    validation, factory = make("exec:true")
    endpoint = validation.attach(tiny_card(), engine, pipeline=pipeline)
    assert factory.calls[0]["pipeline"] is pipeline
    assert endpoint is not None and endpoint._endpoint.pipeline is pipeline  # type: ignore[attr-defined]
    assert validation.wait_released(20)
