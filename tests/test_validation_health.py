"""/live and /health, as plain handlers and over the granian-hosted standalone server, for a
validation of the production loopback endpoint serving the packaged tiny model through the
mocker engine."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from shakedown.endpoint import Engine
from shakedown.validation import (
    HealthServer,
    ValidationConfig,
    WorkerValidation,
    health_response,
    live_response,
)
from validation_helpers import Factory, tiny_card, tiny_engine


@pytest.fixture(scope="module")
def engine() -> Engine:
    return tiny_engine()


def validation(gates: str, hold: str) -> WorkerValidation:
    env = {"DYN_WORKER_VALIDATION_GATES": gates, "DYN_WORKER_VALIDATION_HOLD": hold}
    return WorkerValidation(ValidationConfig.from_env(env), endpoint_factory=Factory())


def get(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_live_is_always_200() -> None:
    assert live_response()[0] == 200


def test_hold_health_503_with_reason_until_release(engine: Engine) -> None:
    v = validation("exec:true", "health")
    try:
        server = HealthServer(v)
        server.start()
        try:
            base = f"http://127.0.0.1:{server.port}"
            assert get(base + "/live") == (200, {"status": "live", "message": "Service is live"})
            code, body = get(base + "/health")
            assert (
                code == 503 and body["status"] == "not_ready" and body["validation"] == "unattached"
            )
            assert body["message"] == "waiting for the worker to attach its model"
            v.attach(tiny_card())
            code, body = get(base + "/health")
            assert (code, body["message"]) == (503, "waiting for the engine to register")
            v.register_engine(engine)
            assert v.wait_finished(10) is not None
            code, body = get(base + "/health")
            assert (code, body["status"], body["validation"]) == (200, "ready", "released")
            assert get(base + "/nope")[0] == 404
        finally:
            server.stop()
    finally:
        v.close()


def test_hold_health_failed_gate_stays_503_with_the_reason(engine: Engine) -> None:
    v = validation("exec:false", "health")
    try:
        v.attach(tiny_card(), engine)
        assert v.wait_finished(10) is not None
        code, body = health_response(v)
        payload = json.loads(body)
        assert code == 503 and payload["validation"] == "held"
        assert payload["message"] == "gate(s) failed: 'false' (exit status 1)"
    finally:
        v.close()


def test_hold_card_health_is_200_while_held(engine: Engine) -> None:
    v = validation("exec:false", "card")
    try:
        v.attach(tiny_card(), engine)
        assert v.wait_finished(10) is not None
        code, body = health_response(v)
        assert code == 200
        assert json.loads(body)["message"].startswith("Service is ready; model card held")
    finally:
        v.close()


def test_validation_off_is_ready() -> None:
    v = WorkerValidation(ValidationConfig())
    assert health_response(v)[0] == 200


def test_health_server_restarts_without_leaking_fds() -> None:
    import os

    v = WorkerValidation(ValidationConfig())
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        server = HealthServer(v)
        server.start()
        assert get(f"http://127.0.0.1:{server.port}/health")[0] == 200
        server.stop()
    assert len(os.listdir("/proc/self/fd")) <= before + 1
