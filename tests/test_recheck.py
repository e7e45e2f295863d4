"""Rechecks after release (DYN_WORKER_VALIDATION_RECHECK_S): the production loopback serving
the packaged tiny model through shakedown's mocker, an engine that can be broken after release,
and the real check runner. Every wait is a condition with a deadline."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shakedown.endpoint import Engine
from shakedown.integrations.dynamo import HeldRegistration
from shakedown.integrations.dynamo_run import counted_handler
from shakedown.validation import ValidationConfig, ValidationConfigError, WorkerValidation
from shakedown.validation.activity import Activity
from validation_helpers import Factory, chat_status, listening, py, tiny_card, tiny_engine

DEADLINE_S = 30.0
PASS_GATE = "exec:" + " ".join(py("pass"))


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class BreakableEngine:
    """The mocker, until `broken` is set: then each request raises (after waiting for `gate`
    when one is set, so a test can act while a recheck's request is in flight)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.broken = False
        self.gate: threading.Event | None = None
        self.waiting = threading.Event()
        self.requests = 0

    async def generate(self, request: dict[str, Any], context: Any = None) -> AsyncIterator[Any]:
        self.requests += 1
        if self.broken:
            gate = self.gate
            if gate is not None:
                self.waiting.set()
                while not gate.is_set():
                    await asyncio.sleep(0.01)
            raise RuntimeError("the engine broke after release")
        async for item in self._engine(request, context):
            yield item


@pytest.fixture()
def engine() -> BreakableEngine:
    return BreakableEngine(tiny_engine())


@pytest.fixture()
def make(tmp_path: Path) -> Iterator[Callable[..., WorkerValidation]]:
    made: list[WorkerValidation] = []

    def build(**env: str) -> WorkerValidation:
        environ = {
            "DYN_WORKER_VALIDATION_GATES": PASS_GATE,
            "DYN_WORKER_VALIDATION_RECHECK_S": "0.2",
            "DYN_WORKER_VALIDATION_REPORT": str(tmp_path / "report.json"),
        } | env
        validation = WorkerValidation(
            ValidationConfig.from_env(environ), endpoint_factory=Factory(), log_dir=tmp_path
        )
        made.append(validation)
        return validation

    yield build
    for validation in made:
        validation.close()


def released(validation: WorkerValidation, engine: BreakableEngine, events: list[str]) -> int:
    validation.add_release_hook(lambda: events.append("release"), name="publish")
    validation.add_unrelease_hook(lambda: events.append("unrelease"), name="unpublish")
    endpoint = validation.attach(tiny_card(), engine.generate)
    assert endpoint is not None and validation.wait_released(DEADLINE_S)
    return endpoint.port


def counts(validation: WorkerValidation) -> dict[str, Any]:
    rechecks = validation.rechecks
    assert rechecks is not None
    return rechecks


def test_a_broken_engine_is_unreleased_after_k_failures_and_re_released_after_k_passes(
    make: Callable[..., WorkerValidation], engine: BreakableEngine, tmp_path: Path
) -> None:
    validation = make(DYN_WORKER_VALIDATION_RECHECK_FAILURES="2")
    events: list[str] = []
    port = released(validation, engine, events)
    # Released with rechecks on: the loopback stays up, token required.
    assert listening(port)
    assert chat_status(port, "") == 401
    wait_for(lambda: counts(validation)["passed"] >= 1, "a passing recheck")
    assert validation.state == "released" and events == ["release"]

    engine.broken = True
    wait_for(lambda: validation.state == "unreleased", "the worker to be unreleased")
    assert events == ["release", "unrelease"]
    rechecks = counts(validation)
    assert rechecks["failed"] == 2 and rechecks["inconclusive"] == 0
    assert validation.is_released and validation.is_unreleased
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "unreleased"
    assert "2 rechecks in a row failed" in report["reason"]
    assert "'chat-stream' (chat (unary): HTTP 500" in report["reason"]
    assert report["recheck"]["last"]["verdict"] == "failed"
    # Held again: further failures never call the unrelease hooks twice.
    failed = counts(validation)["failed"]
    wait_for(lambda: counts(validation)["failed"] >= failed + 2, "two more failed rechecks")
    assert events == ["release", "unrelease"]

    engine.broken = False
    wait_for(lambda: validation.state == "released", "the worker to be released again")
    assert events == ["release", "unrelease", "release"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "released" and "2 rechecks in a row passed" in report["reason"]


def test_a_healthy_worker_stays_released_over_many_rechecks(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make()
    events: list[str] = []
    released(validation, engine, events)
    wait_for(lambda: counts(validation)["passed"] >= 5, "five passing rechecks")
    rechecks = counts(validation)
    assert (rechecks["failed"], rechecks["inconclusive"]) == (0, 0)
    assert validation.state == "released" and events == ["release"]
    assert validation.health_ready


def test_no_recheck_starts_while_a_user_request_is_in_flight(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make(DYN_WORKER_VALIDATION_RECHECK_FAILURES="1")
    events: list[str] = []
    released(validation, engine, events)
    wait_for(lambda: counts(validation)["passed"] >= 1, "a passing recheck")
    with validation.activity.request():  # a long user stream
        engine.broken = True
        before = engine.requests
        seen = counts(validation)
        # Ten intervals go by with the worker busy: no recheck starts, nothing is counted.
        deadline = time.monotonic() + 10 * 0.2
        while time.monotonic() < deadline:
            time.sleep(0.05)
        after = counts(validation)
        assert engine.requests == before
        assert after["failed"] == seen["failed"] == 0 and validation.state == "released"
    wait_for(lambda: validation.state == "unreleased", "the idle worker's recheck to fail")
    assert events == ["release", "unrelease"]


def test_a_failure_while_a_user_request_started_is_inconclusive(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make(DYN_WORKER_VALIDATION_RECHECK_FAILURES="1")
    events: list[str] = []
    released(validation, engine, events)
    wait_for(lambda: counts(validation)["passed"] >= 1, "a passing recheck")
    engine.gate = threading.Event()
    engine.broken = True
    wait_for(engine.waiting.is_set, "a recheck's request in the engine")
    with validation.activity.request():  # the worker got busy meanwhile
        engine.gate.set()
        wait_for(lambda: counts(validation)["inconclusive"] >= 1, "the recheck's verdict")
        assert counts(validation)["failed"] == 0 and validation.state == "released"
    assert events == ["release"]
    wait_for(lambda: validation.state == "unreleased", "an idle recheck to fail")
    last = counts(validation)["last"]
    assert last["verdict"] == "failed" and last["busy"] is False


def test_a_failing_unrelease_hook_does_not_stop_the_others(
    make: Callable[..., WorkerValidation], engine: BreakableEngine, tmp_path: Path
) -> None:
    validation = make(DYN_WORKER_VALIDATION_RECHECK_FAILURES="1")
    events: list[str] = []

    def broken_hook() -> None:
        raise OSError("discovery is down")

    validation.add_unrelease_hook(broken_hook, name="broken")
    released(validation, engine, events)
    engine.broken = True
    wait_for(lambda: validation.state == "unreleased", "the worker to be unreleased")
    assert events == ["release", "unrelease"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert "unrelease hook 'broken' failed: OSError('discovery is down')" in report["reason"]


def test_hold_health_is_not_ready_while_unreleased(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make(
        DYN_WORKER_VALIDATION_HOLD="health", DYN_WORKER_VALIDATION_RECHECK_FAILURES="1"
    )
    released(validation, engine, [])
    assert validation.health_ready
    engine.broken = True
    wait_for(lambda: validation.state == "unreleased", "the worker to be unreleased")
    assert not validation.health_ready


def test_close_stops_rechecks_and_leaves_no_thread(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make()
    port = released(validation, engine, [])
    engine.gate = threading.Event()  # a recheck hangs in the engine when close comes
    engine.broken = True
    wait_for(engine.waiting.is_set, "a recheck's request in the engine")
    validation.close()
    engine.gate.set()
    assert not listening(port)
    assert not [t for t in threading.enumerate() if t.name.startswith("shakedown-recheck")]
    assert counts(validation)["failed"] == 0 and validation.state == "released"


def test_rechecks_off_closes_the_loopback_at_release(
    make: Callable[..., WorkerValidation], engine: BreakableEngine
) -> None:
    validation = make(DYN_WORKER_VALIDATION_RECHECK_S="0")
    port = released(validation, engine, [])
    wait_for(lambda: not listening(port), "the loopback to close")
    assert validation.rechecks is None


def test_a_custom_suite_is_run(
    make: Callable[..., WorkerValidation], engine: BreakableEngine, tmp_path: Path
) -> None:
    suite = tmp_path / "recheck.json"
    suite.write_text(json.dumps({"check": [{"kind": "conformance", "items": ["models"]}]}))
    validation = make(DYN_WORKER_VALIDATION_RECHECK_SUITE=str(suite))
    released(validation, engine, [])
    wait_for(lambda: counts(validation)["passed"] >= 2, "two passing rechecks")
    # Listing models never reaches the engine: the broken engine cannot fail this suite.
    engine.broken = True
    passed = counts(validation)["passed"]
    wait_for(lambda: counts(validation)["passed"] >= passed + 3, "three more passes")
    assert counts(validation)["failed"] == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DYN_WORKER_VALIDATION_RECHECK_S": "soon"}, "DYN_WORKER_VALIDATION_RECHECK_S must be"),
        ({"DYN_WORKER_VALIDATION_RECHECK_S": "-1"}, "DYN_WORKER_VALIDATION_RECHECK_S must be"),
        ({"DYN_WORKER_VALIDATION_RECHECK_S": "inf"}, "DYN_WORKER_VALIDATION_RECHECK_S must be"),
        (
            {"DYN_WORKER_VALIDATION_RECHECK_FAILURES": "0"},
            "DYN_WORKER_VALIDATION_RECHECK_FAILURES must be a whole number >= 1",
        ),
        (
            {"DYN_WORKER_VALIDATION_RECHECK_FAILURES": "2.5"},
            "DYN_WORKER_VALIDATION_RECHECK_FAILURES must be",
        ),
        (
            {"DYN_WORKER_VALIDATION_RECHECK_SUITE": "/nonexistent/suite.json"},
            "DYN_WORKER_VALIDATION_RECHECK_SUITE: /nonexistent/suite.json: cannot read",
        ),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationConfigError, match=message.replace(".", r"\.")):
        ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": PASS_GATE, **env})


def test_settings_defaults() -> None:
    config = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": PASS_GATE})
    assert (config.recheck_s, config.recheck_failures, config.recheck_suite) == (None, 3, None)
    config = ValidationConfig.from_env(
        {"DYN_WORKER_VALIDATION_GATES": PASS_GATE, "DYN_WORKER_VALIDATION_RECHECK_S": "30"}
    )
    assert (config.recheck_s, config.recheck_failures) == (30.0, 3)


def test_held_registration_unpublishes_and_publishes_anew() -> None:
    """The card-mode release hook and its counterpart, on recording register/unregister."""
    calls: list[tuple[str, Any, Any]] = []

    async def register(*args: Any, **kwargs: Any) -> None:
        calls.append(("register", args[3], kwargs.get("lora_name")))

    async def unregister(endpoint: Any, lora_name: Any = None) -> None:
        calls.append(("unregister", endpoint, lora_name))

    async def main() -> None:
        held = HeldRegistration(register)
        await held.register_model("tokens", "chat", "ep-a", "model-a", "a")
        await held.release()
        await held.register_model("tokens", "chat", "ep-b", "model-b", "b")  # after release
        await held.register_model("tokens", "chat", "ep-c", "model-c", "c")
        assert not held.withdraw("ep-c")  # published: the worker unregisters it for real
        await held.unpublish(unregister)
        assert not held.released and held.pending == 2
        await held.register_model("tokens", "chat", "ep-d", "model-d", "d")  # held meanwhile
        await held.release()

    asyncio.run(main())
    assert calls == [
        ("register", "model-a", None),
        ("register", "model-b", None),
        ("register", "model-c", None),
        ("unregister", "ep-b", None),
        ("unregister", "ep-a", None),
        ("register", "model-a", None),
        ("register", "model-b", None),
        ("register", "model-d", None),
    ]


class _Context:
    def __init__(self, request_id: str) -> None:
        self._id = request_id

    def id(self) -> str:
        return self._id


def test_counted_handler_counts_user_streams_only() -> None:
    activity = Activity()
    own = {"loopback-1"}
    seen: list[Any] = []

    async def handler(request: Any, context: Any) -> AsyncIterator[int]:
        seen.append(context)
        for token in range(3):
            yield token

    async def no_context(request: Any) -> AsyncIterator[int]:
        yield 1

    async def main() -> None:
        counted = counted_handler(handler, activity, lambda: own)
        user = counted({}, context=_Context("user-1"))
        assert await user.__anext__() == 0
        assert activity.in_flight == 1
        loopback = counted({}, context=_Context("loopback-1"))
        assert [item async for item in loopback] == [0, 1, 2]
        assert activity.mark() == (1, 1)
        await user.aclose()  # the client went away mid-stream
        assert activity.mark() == (1, 0)
        plain = counted_handler(no_context, activity, lambda: own)
        assert [item async for item in plain({}, context=_Context("user-2"))] == [1]
        assert activity.mark() == (2, 0)

    asyncio.run(main())
    assert [context.id() for context in seen] == ["user-1", "loopback-1"]
