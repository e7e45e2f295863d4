"""A held worker's endpoint, reached by an operator in its pod: the token in a file only the
worker's user reads (its path logged and reported, never the token), and `shakedown check
--attach` finding the endpoint and token by itself."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shakedown.validation import ValidationConfig, WorkerValidation
from validation_helpers import Factory, tiny_card, tiny_engine

FAIL = json.dumps([{"name": "fails", "exec": [sys.executable, "-c", "raise SystemExit(1)"]}])
PASS = json.dumps([{"name": "passes", "exec": [sys.executable, "-c", "pass"]}])


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "shakedown"


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    made: list[WorkerValidation] = []

    def build(gates: str) -> WorkerValidation:
        environ = {"DYN_WORKER_VALIDATION_GATES": gates,
                   "DYN_WORKER_VALIDATION_REPORT": str(tmp_path / "report.json")}  # fmt: skip
        validation = WorkerValidation(
            ValidationConfig.from_env(environ),
            endpoint_factory=Factory(),
            log_dir=tmp_path / "logs",
        )
        made.append(validation)
        return validation

    yield build
    for validation in made:
        validation.close()


def check_attach(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYN_VALIDATION"))}
    env["XDG_RUNTIME_DIR"] = str(runtime.parent)
    return subprocess.run(
        [sys.executable, "-m", "shakedown", "check", "--attach", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_held_worker_is_reachable_by_its_record(
    make: Any, runtime: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shakedown.validation")
    validation = make(FAIL)
    validation.attach(tiny_card(), tiny_engine())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "held"

    token_file = runtime / f"{os.getpid()}.token"
    assert token_file.read_text() == validation.api_key
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    record = json.loads((runtime / f"{os.getpid()}.json").read_text())
    assert record["base_url"] == report.base_url and record["token_file"] == str(token_file)
    # The path is logged and reported; the token is in neither.
    assert report.token_file == str(token_file)
    written = (tmp_path / "report.json").read_text()
    assert str(token_file) in written and validation.api_key not in written
    assert str(token_file) in caplog.text and validation.api_key not in caplog.text

    # An operator in the pod: no URL, no token, no model given.
    run = check_attach(runtime)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        run.stdout.splitlines()[0]
        == f"shakedown check: {report.base_url}, 'tiny-under-test', suite 'default'"
    )
    # the card's parsers came with the record: reasoning and tool calls are checked too
    assert run.stdout.splitlines()[-1] == "OK: of 9 checks 9 passed, 0 failed, 0 skipped"
    assert check_attach(runtime, str(os.getpid())).returncode == 0

    validation.close()
    assert not token_file.exists() and not (runtime / f"{os.getpid()}.json").exists()
    gone = check_attach(runtime)
    assert gone.returncode == 1
    assert f"no held worker has an endpoint record in {runtime}" in gone.stderr


def test_a_released_worker_leaves_no_record(make: Any, runtime: Path) -> None:
    validation = make(PASS)
    validation.attach(tiny_card(), tiny_engine())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "released"
    assert not runtime.exists()  # the last record out takes its directory along


def test_no_record_in_a_directory_others_can_enter(
    make: Any, runtime: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    validation = make(FAIL)
    validation.attach(tiny_card(), tiny_engine())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "held" and report.token_file is None
    assert list(runtime.iterdir()) == []
    assert (
        f"no endpoint record for operators: {runtime} is open to other users (mode 755)"
        in caplog.text
    )


def test_attach_to_a_worker_that_is_not_there(runtime: Path) -> None:
    run = check_attach(runtime, "999999999")
    assert run.returncode == 1
    assert "no held worker 999999999 has an endpoint record" in run.stderr
