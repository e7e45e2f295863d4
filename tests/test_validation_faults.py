"""Fault injection: no gate outcome other than a pass can release a worker.

Each case runs a real validation (the production loopback endpoint serving the tiny model
through the mocker, real gate processes, real loopback sidecars) with one passing gate and
one fault, in order and in parallel, and checks the worker is held with the fault in its
report.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shakedown.endpoint import Engine
from shakedown.validation import (
    ExecGate,
    Gate,
    GateResult,
    UrlGate,
    ValidationConfig,
    WorkerValidation,
)
from shakedown.validation import gates as gates_module
from validation_helpers import (
    Factory,
    RawSidecar,
    Sidecar,
    free_port,
    py,
    send,
    tiny_card,
    tiny_engine,
    trickle,
    wait_for_file,
)

OK = b'HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{"ok": true}'


@dataclass
class Fault:
    """One way for validation to go wrong: the gates (the faulty one is named "fault"), and
    what else the case sets up."""

    gates: list[Gate]
    config: dict[str, Any] = field(default_factory=dict)
    log_dir: Path | None = None
    hooks: list[Callable[[], object]] = field(default_factory=list)
    # Called once attach returned; for faults that come from outside (close()).
    meanwhile: Callable[[WorkerValidation], None] | None = None
    gate_fault: bool = True


@dataclass
class Kit:
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    stops: list[Callable[[], None]]

    def sidecar(self, status: int = 200) -> str:
        server = Sidecar(status)
        self.stops.append(server.stop)
        return server.url

    def raw(self, answer: Callable[..., None]) -> str:
        server = RawSidecar(answer)
        self.stops.append(server.stop)
        return server.url


def passing(kit: Kit) -> Gate:
    return UrlGate("ok", kit.sidecar(), timeout_s=30)


def exec_fault(code: str, **kw: Any) -> Callable[[Kit], Fault]:
    return lambda kit: Fault([passing(kit), ExecGate("fault", tuple(py(code)), **kw)])


def raising_runner(error: BaseException) -> Callable[[Kit], Fault]:
    def make(kit: Kit) -> Fault:
        real = gates_module.run_exec_gate

        def runner(gate: ExecGate, *args: Any, **kwargs: Any) -> GateResult:
            if gate.name == "fault":
                raise error
            return real(gate, *args, **kwargs)

        kit.monkeypatch.setattr(gates_module, "run_exec_gate", runner)
        return Fault([passing(kit), ExecGate("fault", ("true",))])

    return make


def unusable_log_dir(kit: Kit) -> Fault:
    blocker = kit.tmp_path / "blocker"
    blocker.write_text("")
    return Fault([passing(kit), ExecGate("fault", ("true",))], log_dir=blocker / "logs")


def failing_hook(kit: Kit) -> Fault:
    def publish_fails() -> None:
        raise RuntimeError("discovery is down")

    return Fault([passing(kit), ExecGate("also-ok", ("true",))], hooks=[publish_fails],
                 gate_fault=False)  # fmt: skip


def failing_async_hook(kit: Kit) -> Fault:
    async def publish_fails() -> None:
        raise RuntimeError("discovery is down")

    return Fault([passing(kit), ExecGate("also-ok", ("true",))], hooks=[publish_fails],
                 gate_fault=False)  # fmt: skip


def stopped_while_running(kit: Kit) -> Fault:
    started = kit.tmp_path / "started"
    code = f"import time; open({str(started)!r}, 'w').write('x'); time.sleep(60)"

    def close_once_started(validation: WorkerValidation) -> None:
        wait_for_file(started, 20)
        validation.close()

    return Fault([passing(kit), ExecGate("fault", tuple(py(code)))],
                 meanwhile=close_once_started)  # fmt: skip


def stopped_on_a_silent_sidecar(kit: Kit) -> Fault:
    server = RawSidecar(lambda conn, stopped: stopped.wait())
    kit.stops.append(server.stop)

    def close_once_asked(validation: WorkerValidation) -> None:
        assert server.request_seen.wait(20)
        validation.close()

    return Fault([passing(kit), UrlGate("fault", server.url, timeout_s=600)],
                 meanwhile=close_once_asked)  # fmt: skip


FAULTS: dict[str, Callable[[Kit], Fault]] = {
    "exit-status": exec_fault("raise SystemExit(3)"),
    "crash": exec_fault("import os; os.abort()"),
    "signal": exec_fault("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
    "timeout": exec_fault("import time; time.sleep(60)", timeout_s=0.5),
    "overall-deadline": lambda kit: dataclasses.replace(
        exec_fault("import time; time.sleep(60)", timeout_s=60)(kit),
        config={"timeout_s": 3.0},
    ),
    "missing-command": lambda kit: Fault([passing(kit), ExecGate("fault", ("/nonexistent/x",))]),
    "nul-in-argv": lambda kit: Fault([passing(kit), ExecGate("fault", ("true", "a\0"))]),
    "nul-in-env": lambda kit: Fault([passing(kit), ExecGate("fault", ("true",), env={"A": "\0"})]),
    "equals-in-env-name": lambda kit: Fault(
        [passing(kit), ExecGate("fault", ("true",), env={"A=B": "c"})]
    ),
    "bad-url-port": lambda kit: Fault([passing(kit), UrlGate("fault", "http://127.0.0.1:99999/")]),
    "bad-url-port-text": lambda kit: Fault(
        [passing(kit), UrlGate("fault", "http://127.0.0.1:abc/")]
    ),
    "runner-exception": raising_runner(RuntimeError("injected")),
    "runner-base-exception": raising_runner(SystemExit("injected")),
    "unusable-log-dir": unusable_log_dir,
    "url-500": lambda kit: Fault([passing(kit), UrlGate("fault", kit.sidecar(500), timeout_s=10)]),
    "url-cut-short": lambda kit: Fault(
        [passing(kit), UrlGate("fault", kit.raw(send(OK[:-3])), timeout_s=10)]
    ),
    "url-trickle": lambda kit: Fault(
        [passing(kit), UrlGate("fault", kit.raw(trickle(OK, 0.05)), timeout_s=0.5)]
    ),
    "url-refused": lambda kit: Fault(
        [passing(kit), UrlGate("fault", f"http://127.0.0.1:{free_port()}/", timeout_s=0.5)]
    ),
    "release-hook-fails": failing_hook,
    "async-release-hook-fails": failing_async_hook,
    "stopped-while-a-gate-runs": stopped_while_running,
    "stopped-while-a-sidecar-is-silent": stopped_on_a_silent_sidecar,
}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return tiny_engine()


@pytest.fixture
def kit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kit]:
    made = Kit(tmp_path, monkeypatch, [])
    yield made
    for stop in made.stops:
        stop()


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_no_outcome_but_a_pass_releases(
    name: str, parallel: bool, kit: Kit, engine: Engine, tmp_path: Path
) -> None:
    fault = FAULTS[name](kit)
    report_path = tmp_path / "report.json"
    config = ValidationConfig(
        gates=tuple(fault.gates), parallel=parallel, report_path=report_path, **fault.config
    )
    validation = WorkerValidation(
        config, endpoint_factory=Factory(), log_dir=fault.log_dir or tmp_path / "logs"
    )
    published: list[str] = []
    for hook in fault.hooks:
        validation.add_release_hook(hook)
    validation.add_release_hook(lambda: published.append("card"), name="publish")
    try:
        validation.attach(tiny_card(), engine)
        if fault.meanwhile is not None:
            fault.meanwhile(validation)
        report = validation.wait_finished(30)
    finally:
        validation.close()
    assert report is not None, "validation never finished"
    assert report.status == "held" and validation.state == "held"
    assert not validation.is_released and not validation.wait_released(0)
    assert published == []
    saved = json.loads(report_path.read_text())
    assert saved["status"] == "held" and saved["reason"] == report.reason
    outcomes = {gate["name"]: gate["outcome"] for gate in saved["gates"]}
    assert list(outcomes) == [gate.name for gate in fault.gates]  # every configured gate
    if fault.meanwhile is None:  # a stop may also catch the passing gate before its answer
        assert outcomes["ok"] == "passed"
    if fault.gate_fault:
        assert outcomes["fault"] == "failed"
        assert "'fault'" in report.reason and report.reason.startswith("gate(s) failed")
    else:
        assert set(outcomes.values()) == {"passed"}
        assert report.reason.startswith("release hook")


def test_the_same_setup_without_a_fault_is_released(engine: Engine, tmp_path: Path) -> None:
    """The cases above hold because of their fault: with none, the same setup is released."""
    sidecar = Sidecar()
    config = ValidationConfig(
        gates=(UrlGate("ok", sidecar.url, timeout_s=30), ExecGate("also-ok", ("true",))),
        parallel=True,
        report_path=tmp_path / "report.json",
    )
    validation = WorkerValidation(config, endpoint_factory=Factory(), log_dir=tmp_path / "logs")
    try:
        validation.attach(tiny_card(), engine)
        assert validation.wait_released(30)
    finally:
        validation.close()
        sidecar.stop()
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "released"
