"""Issue 12 item 5: rechecks after release under `shakedown run`, with the real Dynamo 1.6.1
frontend watching. A stock-shaped worker (the packaged tiny model, shakedown's mocker, the
stock `dynamo.llm.register_model`) whose engine a flag file breaks after release: its model
leaves the frontend's /v1/models after K failed rechecks (hold=card), or its /health turns
503 (hold=health), and comes back once K rechecks pass again."""

from __future__ import annotations

import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import stack
from .conftest import Dynamo
from .test_run import _chat, _get, _listed, _system_port, _wait

# The worker: serves the mocker until FLAGS/broken exists (then every request raises);
# FLAGS/slow makes each token take 0.1 s (a long user stream) and marks FLAGS/started-N.
WORKER = """
import asyncio, pathlib, sys
from dynamo.llm import ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model
from dynamo.runtime import DistributedRuntime
from shakedown._core import Pipeline
from shakedown.cli import TINY_MODEL, TINY_PARSERS, make_mocker

name, flags = sys.argv[1], pathlib.Path(sys.argv[2])
mocker = make_mocker(Pipeline(TINY_MODEL), TINY_MODEL)

async def generate(request, context):
    if (flags / "broken").exists():
        raise RuntimeError("the engine broke after release")
    slow = (flags / "slow").exists()
    mocker.token_delay = 0.1 if slow else 0.0
    if slow:  # which requests reached the engine slow, by their max_tokens
        (flags / f"started-{request['stop_conditions'].get('max_tokens')}").touch()
    async for item in mocker.generate(request, context):
        yield item

async def main():
    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    endpoint = runtime.endpoint(f"{name}.backend.generate")
    config = ModelRuntimeConfig()
    config.reasoning_parser, config.tool_call_parser = TINY_PARSERS
    await register_model(
        ModelInput.Tokens, ModelType.Chat | ModelType.Completions, endpoint, str(TINY_MODEL),
        name, worker_type=WorkerType.Aggregated, runtime_config=config,
    )
    await endpoint.serve_endpoint(generate)

asyncio.run(main())
"""


class Worker:
    def __init__(self, proc: stack.Proc, flags: Path, report: Path) -> None:
        self.proc, self.flags, self.report = proc, flags, report

    def status(self) -> str | None:
        if not self.report.is_file():
            return None
        data: dict[str, Any] = json.loads(self.report.read_text())
        return str(data["status"])

    def report_data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.report.read_text())
        return data


@pytest.fixture()
def start(dynamo: Dynamo, work_dir: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(name: str, *, hold: str = "card", **extra_env: str) -> Worker:
        d = work_dir / f"recheck-{name}"
        flags = d / "flags"
        flags.mkdir(parents=True)
        script = d / "worker.py"
        script.write_text(WORKER)
        report = d / "report.json"
        env = {
            **dynamo.env,
            "DYN_WORKER_VALIDATION_GATES": f"exec:{sys.executable} -c pass",
            "DYN_WORKER_VALIDATION_REPORT": str(report),
            "DYN_WORKER_VALIDATION_HOLD": hold,
            "DYN_WORKER_VALIDATION_RECHECK_S": "0.2",
            "DYN_WORKER_VALIDATION_RECHECK_FAILURES": "2",
            **extra_env,
        }
        argv = [*stack.serve_argv(sys.executable, dynamo.site), "run", "--",
                "python", str(script), name, str(flags)]  # fmt: skip
        worker = Worker(stack.spawn(name, argv, env, d), flags, report)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.proc.stop()


def test_a_broken_engine_leaves_the_frontend_and_comes_back(
    dynamo: Dynamo, start: Callable[..., Worker]
) -> None:
    name = "recheck-card"
    worker = start(name)
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed")
    status, message = _chat(f"{dynamo.base_url}/v1", name)
    assert status == 200 and message["reasoning_content"], message

    (worker.flags / "broken").touch()
    _wait(lambda: name not in _listed(dynamo), worker.proc, "the model to leave /v1/models")
    # The report is written once the unrelease hooks have run.
    _wait(lambda: worker.status() == "unreleased", worker.proc, "the report to say so")
    report = worker.report_data()
    assert report["status"] == "unreleased", report
    assert "2 rechecks in a row failed" in report["reason"]
    assert report["recheck"]["consecutive_failures"] >= 2
    assert worker.proc.alive()  # not a restart

    (worker.flags / "broken").unlink()
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed again")
    _wait(lambda: worker.status() == "released", worker.proc, "the report to say so")
    assert _chat(f"{dynamo.base_url}/v1", name)[0] == 200
    # Released: SIGTERM ends the rechecks and the worker its own way.
    worker.proc.popen.send_signal(signal.SIGTERM)
    assert worker.proc.popen.wait(60) == 128 + signal.SIGTERM
    after = worker.proc.log.read_text().split("rechecks in a row passed")[-1]
    assert "stopping the rechecks" in after and "ERROR shakedown" not in after


def test_a_user_stream_in_flight_is_never_a_failure(
    dynamo: Dynamo, start: Callable[..., Worker]
) -> None:
    """The engine breaks while a user's slow stream runs through the frontend: the handler's
    in-flight count keeps every recheck off until it ends, so nothing fails meanwhile."""
    name = "recheck-busy"
    # 2 s of idleness before a recheck: the log is read well inside it once the stream ends.
    worker = start(name, DYN_WORKER_VALIDATION_RECHECK_S="2")
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed")
    (worker.flags / "slow").touch()
    outcome: list[tuple[int, Any]] = []
    stream = threading.Thread(
        target=lambda: outcome.append(_long_stream(dynamo.base_url, name)), daemon=True
    )
    stream.start()
    started = worker.flags / "started-30"
    _wait(started.exists, worker.proc, "the user's stream to reach the engine")
    (worker.flags / "broken").touch()
    stream.join(60)
    log = worker.proc.log.read_text()
    assert outcome and outcome[0][0] == 200, outcome
    assert "recheck failed" not in log
    _wait(lambda: name not in _listed(dynamo), worker.proc, "the idle worker to be unlisted")


def _long_stream(base_url: str, model: str) -> tuple[int, Any]:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 30,
         "stream": True}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions", body, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        return resp.status, resp.read()


def _health(url: str) -> int:
    """The status of /health; 0 while the worker's status server is not up yet."""
    try:
        return _get(url)[0]
    except urllib.error.URLError:
        return 0


def test_hold_health_unregisters_the_card(dynamo: Dynamo, start: Callable[..., Worker]) -> None:
    """Under hold=health the card went through at registration; failed rechecks unregister
    it (Dynamo 1.6.1 cannot make a served endpoint not ready again: /health stays 200)."""
    name = "recheck-health"
    port = _system_port()
    worker = start(name, hold="health", DYN_SYSTEM_PORT=str(port))
    health = f"http://{stack.LOOPBACK}:{port}/health"
    _wait(lambda: _health(health) == 200, worker.proc, "the worker's /health to be ready")
    assert name in _listed(dynamo)
    (worker.flags / "broken").touch()
    _wait(lambda: name not in _listed(dynamo), worker.proc, "the model to leave /v1/models")
    _wait(lambda: worker.status() == "unreleased", worker.proc, "the report to say so")
    (worker.flags / "broken").unlink()
    _wait(lambda: name in _listed(dynamo), worker.proc, "the model to be listed again")
    _wait(lambda: worker.status() == "released", worker.proc, "the report to say so")
    assert _health(health) == 200
