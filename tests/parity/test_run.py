"""Issue 11: `shakedown run -- python WORKER ...` holds an unmodified Dynamo Python worker's
registration until its gates pass, with the real Dynamo 1.6.1 frontend watching discovery.

The workers (dynamo_worker.py: `dynamo._core.register_model`; tiny_worker.py:
`dynamo.llm.register_model`) know nothing of validation. The gate (run_gate.py) records the
loopback it was given and can wait for a file, so a test looks at the frontend while the
worker is held.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shakedown.integrations.dynamo_run import EXIT_CRASHED, EXIT_HELD

from . import stack
from .conftest import Dynamo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DEADLINE_S = 60.0


@dataclass
class Worker:
    proc: stack.Proc
    record: Path
    go: Path
    report: Path

    def gate(self) -> dict[str, Any]:
        """What the gate recorded once it started (validation is running by then)."""
        _wait(self.record.is_file, self.proc, "the gate to start")
        data: dict[str, Any] = json.loads(self.record.read_text())
        return data

    def report_data(self) -> dict[str, Any]:
        _wait(self.report.is_file, self.proc, "the validation report")
        data: dict[str, Any] = json.loads(self.report.read_text())
        return data

    def signal_and_wait(self, signum: int) -> int:
        os.kill(self.proc.pid, signum)
        return self.proc.popen.wait(DEADLINE_S)


def _wait(
    predicate: Callable[[], object],
    proc: stack.Proc | None,
    what: str,
    timeout_s: float = DEADLINE_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc is not None and not proc.alive():
            pytest.fail(f"{proc.name} exited while waiting for {what}:\n{proc.log_tail()}")
        if time.monotonic() > deadline:
            tail = proc.log_tail() if proc is not None else ""
            pytest.fail(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.1)


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, None


def _chat(base_url: str, model: str, token: str | None = None) -> tuple[int, Any]:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
    ).encode()
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{base_url}/chat/completions", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())["choices"][0]["message"]
    except urllib.error.HTTPError as err:
        return err.code, None


def _listed(dynamo: Dynamo) -> list[str]:
    _, body = _get(f"{dynamo.base_url}/v1/models")
    return [m["id"] for m in body["data"]]


@pytest.fixture()
def published_since(dynamo: Dynamo, model_dir: Path, work_dir: Path) -> Callable[[str], None]:
    """Register and list a control model with an unheld worker, now: a card published
    earlier, by a held worker whose hold failed, would be listed by the time it is."""

    def published_since(name: str) -> None:
        control = f"{name}-control"
        argv = [str(dynamo.python), str(HERE / "dynamo_worker.py"), str(model_dir), control]
        proc = stack.spawn(control, argv, dynamo.env, work_dir / "logs")
        try:
            _wait(lambda: control in _listed(dynamo), proc, "the control model to be listed")
        finally:
            proc.stop()

    return published_since


def _system_port() -> int:
    """A free port Dynamo 1.6.1 accepts for DYN_SYSTEM_PORT (it parses an i16)."""
    for port in random.Random().sample(range(20000, 32767), 200):
        with socket.socket() as s:
            try:
                s.bind((stack.LOOPBACK, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture()
def start(dynamo: Dynamo, model_dir: Path, work_dir: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(
        name: str,
        *,
        worker: str = "dynamo_worker.py",
        expect: str | None = None,
        wait_for_go: bool = True,
        child: bool = False,
        hold: str = "card",
        extra_env: dict[str, str] | None = None,
        worker_args: tuple[str, ...] = (),
    ) -> Worker:
        d = work_dir / f"run-{name}"
        d.mkdir()
        record, go, report = d / "gate.json", d / "go", d / "report.json"
        gate = [sys.executable, str(HERE / "run_gate.py"), str(record)]
        if wait_for_go:
            gate += ["--go", str(go)]
        if child:
            gate.append("--child")
        if expect is not None:
            gate += ["--expect", expect]
        env = {
            **dynamo.env,
            "DYN_WORKER_VALIDATION_GATES": json.dumps(
                [{"name": "chat", "exec": gate, "timeout_s": 120}]
            ),
            "DYN_WORKER_VALIDATION_REPORT": str(report),
            "DYN_WORKER_VALIDATION_HOLD": hold,
            **(extra_env or {}),
        }
        script = HERE / worker
        args = (str(model_dir), name) if worker == "dynamo_worker.py" else (name, *worker_args)
        argv = [*stack.serve_argv(sys.executable, dynamo.site), "run", "--",
                "python", str(script), *args]  # fmt: skip
        started = Worker(stack.spawn(name, argv, env, d), record, go, report)
        workers.append(started)
        return started

    yield start
    for worker in workers:
        worker.proc.stop()


def test_card_is_published_only_on_release(
    dynamo: Dynamo, start: Callable[..., Worker], published_since: Callable[[str], None]
) -> None:
    name = "run-pass"
    worker = start(name)
    gate = worker.gate()  # the worker has called register_model by now
    published_since(name)
    assert name not in _listed(dynamo)
    # The loopback drives the worker's own endpoint in-process, token required.
    status, message = _chat(gate["base_url"], name, gate["api_key"])
    assert (status, message["content"], message["reasoning_content"]) == (200, "First turn.", "a")
    assert _chat(gate["base_url"], name)[0] == 401

    worker.go.touch()
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed")
    status, message = _chat(f"{dynamo.base_url}/v1", name)
    assert (status, message["content"], message["reasoning_content"]) == (200, "First turn.", "a")
    report = worker.report_data()
    assert (report["status"], report["model"]) == ("released", name)
    assert [g["outcome"] for g in report["gates"]] == ["passed"]
    assert "released" in worker.proc.log.read_text() and "after the registration call" in (
        worker.proc.log.read_text()
    )
    # Released: the worker's own exit status (SIGTERM's, as it installs no handler).
    assert worker.signal_and_wait(signal.SIGTERM) == 128 + signal.SIGTERM


def test_failing_gate_keeps_the_model_unlisted(
    dynamo: Dynamo, start: Callable[..., Worker], published_since: Callable[[str], None]
) -> None:
    name = "run-fail"
    worker = start(name, expect="something else", wait_for_go=False)
    gate = worker.gate()
    report = worker.report_data()
    assert report["status"] == "held"
    assert report["gates"][0]["outcome"] == "failed"
    published_since(name)
    assert name not in _listed(dynamo)
    # Held: the loopback stays up for debugging, locked by the token.
    assert _chat(gate["base_url"], name, gate["api_key"])[0] == 200
    assert _chat(gate["base_url"], name)[0] == 401
    assert worker.signal_and_wait(signal.SIGTERM) == EXIT_HELD
    assert name not in _listed(dynamo)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("graceful", [False, True], ids=["no-handlers", "dynamo-handlers"])
def test_signal_during_validation_ends_gates_and_worker(
    dynamo: Dynamo, start: Callable[..., Worker], signum: int, graceful: bool
) -> None:
    """With no handler of the worker's (the default action) and with Dynamo's own graceful
    shutdown (asyncio signal handlers, installed after registering, as the stock backends do)."""
    name = f"run-kill-{signal.Signals(signum).name.lower()}-{int(graceful)}"
    if graceful:
        worker = start(name, worker="tiny_worker.py", worker_args=("--graceful",), child=True)
    else:
        worker = start(name, child=True)
    gate = worker.gate()
    assert not _gone(gate["pid"]) and not _gone(gate["child"])
    assert worker.signal_and_wait(signum) == EXIT_HELD
    _wait(lambda: _gone(gate["pid"]) and _gone(gate["child"]), None, "the gate's group to end")
    with pytest.raises(ProcessLookupError):
        os.killpg(worker.proc.pid, 0)  # nothing left of the worker's process group
    report = worker.report_data()
    assert report["status"] == "held" and "stopped" in report["reason"]
    assert name not in _listed(dynamo)


def test_health_hold_keeps_readiness_until_release(
    dynamo: Dynamo, start: Callable[..., Worker]
) -> None:
    name = "run-health"
    port = _system_port()
    worker = start(name, hold="health", extra_env={"DYN_SYSTEM_PORT": str(port)})
    health = f"http://{stack.LOOPBACK}:{port}/health"
    worker.gate()
    # The registration went through; only readiness is held.
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed")
    assert _get(health)[0] == 503
    worker.go.touch()
    _wait(lambda: _get(health)[0] == 200, worker.proc, "the worker's /health to be ready")
    assert worker.report_data()["status"] == "released"


def test_only_the_first_chat_card_gets_the_loopback(
    dynamo: Dynamo, start: Callable[..., Worker], published_since: Callable[[str], None]
) -> None:
    name = "run-several"
    worker = start(name, worker="tiny_worker.py", worker_args=("--several",))
    gate = worker.gate()
    published_since(name)
    models = [f"{name}-embed", name, f"{name}-b", f"{name}-gone"]
    assert not set(models) & set(_listed(dynamo))
    _, listed = _get(f"{gate['base_url']}/models", gate["api_key"])
    assert [m["id"] for m in listed["data"]] == [name]
    assert f"'{name}-embed' gets no loopback" in worker.proc.log.read_text()
    assert f"'{name}-b' gets no loopback ('{name}' has it)" in worker.proc.log.read_text()
    assert worker.signal_and_wait(signal.SIGTERM) == EXIT_HELD
    assert not set(models) & set(_listed(dynamo))


def test_default_gate_releases_held_cards_in_order(dynamo: Dynamo, work_dir: Path) -> None:
    """The production form: `DYN_WORKER_VALIDATION_GATES='exec:shakedown check' shakedown
    run -- python WORKER`, on a worker that registers several models and withdraws one."""
    name = "run-default"
    report = work_dir / f"{name}.json"
    bin_dir = os.path.dirname(sys.executable)
    env = {
        **dynamo.env,
        "DYN_WORKER_VALIDATION_GATES": "exec:shakedown check",
        "DYN_WORKER_VALIDATION_REPORT": str(report),
        "PATH": os.pathsep.join([bin_dir, dynamo.env.get("PATH", "")]),
    }
    argv = [*stack.serve_argv(sys.executable, dynamo.site), "run", "--",
            "python", str(HERE / "tiny_worker.py"), name, "--several"]  # fmt: skip
    proc = stack.spawn(name, argv, env, work_dir / "logs")
    try:
        expected = [f"{name}-embed", name, f"{name}-b"]
        _wait(lambda: set(expected) <= set(_listed(dynamo)), proc, "the held cards")
        assert f"{name}-gone" not in _listed(dynamo)
        data = json.loads(report.read_text())
        assert (data["status"], data["model"]) == ("released", name)
        status, message = _chat(f"{dynamo.base_url}/v1", f"{name}-b")
        assert status == 200 and message["reasoning_content"]
    finally:
        proc.stop()


def test_stock_backends_bind_the_held_registration(dynamo: Dynamo) -> None:
    """dynamo.vllm / dynamo.sglang / dynamo.trtllm import `register_model` & co. by name at
    import time; imported after the hold (engines stubbed, everything else real), every name
    they bind is the hold's."""
    deps = (
        subprocess.run(
            ["bash", str(ROOT / "tools" / "dynamo_backend_deps.sh")],
            env={**os.environ, "SHAKEDOWN_DYNAMO_PYTHON": sys.executable},
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    out = subprocess.run(
        [sys.executable, str(HERE / "stock_imports.py"), dynamo.site, deps],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    bound = json.loads(out.stdout.strip().splitlines()[-1])
    assert bound["dynamo.vllm.main"] == {"register_model": True}
    assert bound["dynamo.vllm.worker_factory"] == {"register_model": True}
    assert bound["dynamo.vllm.handlers"] == {"register_model": True, "unregister_model": True}
    assert bound["dynamo.sglang.register"] == {"register_model": True}
    assert bound["dynamo.sglang.request_handlers.handler_base"] == {
        "register_llm": True,
        "unregister_llm": True,
    }
    assert bound["dynamo.trtllm.workers.llm_worker"] == {"register_model": True}
    assert all(all(names.values()) for names in bound.values()), bound


@pytest.mark.parametrize(
    ("body", "status"),
    [("raise RuntimeError('worker bug')", EXIT_CRASHED), ("pass", EXIT_HELD)],
    ids=["crash", "ends-unregistered"],
)
def test_exit_status_without_release(
    dynamo: Dynamo, work_dir: Path, body: str, status: int
) -> None:
    script = work_dir / f"worker-{status}.py"
    script.write_text(f"import dynamo.llm\n{body}\n")
    env = {**dynamo.env, "DYN_WORKER_VALIDATION_GATES": "exec:true"}
    argv = [*stack.serve_argv(sys.executable, dynamo.site), "run", "--", "python", str(script)]
    proc = stack.spawn(f"exit-{status}", argv, env, work_dir / "logs")
    try:
        assert proc.popen.wait(DEADLINE_S) == status, proc.log_tail()
    finally:
        proc.stop()
