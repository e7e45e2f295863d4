"""Fixtures of the parity suite: the real Dynamo 1.6.1 frontend + mocker and shakedown's
loopback, all on 127.0.0.1, sharing one model directory and one replay trace.

Session-scoped, started on first use; every process is stopped by a finalizer (its whole
process group), also when a test fails or the session is interrupted.
The Dynamo venv is built once per machine under ~/.cache (tools/dynamo_venv.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import stack

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "parity: compares shakedown with the real Dynamo 1.6.1 frontend (slow start)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.parity)


@dataclass(frozen=True)
class Dynamo:
    python: Path
    site: str
    kv_dir: Path
    base_url: str
    env: dict[str, str]


@pytest.fixture(scope="session")
def work_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="shakedown-parity-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="session")
def dynamo_python() -> Path:
    python = stack.dynamo_python()
    if not stack.same_python_version(python):
        pytest.fail(f"{python} is not Python {sys.version_info[0]}.{sys.version_info[1]}")
    return python


@pytest.fixture(scope="session")
def harmony_vocab() -> Path:
    """What the reference's gpt_oss and harmony parsers load (tools/o200k_base.sh)."""
    return stack.harmony_vocab()


@pytest.fixture(scope="session")
def model_dir(work_dir: Path) -> Path:
    """The DeepSeek model dir the reference captures used (./check builds it)."""
    built = FIXTURES / "model-deepseek"
    if (built / "tokenizer.json").is_file():
        return built
    out = work_dir / "model"
    subprocess.run([sys.executable, str(FIXTURES / "build_model.py"), str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def trace(dynamo_python: Path, model_dir: Path, work_dir: Path) -> Path:
    return stack.build_assets(dynamo_python, model_dir, work_dir)


@pytest.fixture(scope="session")
def dynamo(dynamo_python: Path, model_dir: Path, trace: Path, work_dir: Path) -> Iterator[Dynamo]:
    """Dynamo's mocker (replaying `trace`, deepseek_r1 + hermes) behind Dynamo's frontend."""
    kv_dir, logs = work_dir / "kv", work_dir / "logs"
    kv_dir.mkdir()
    procs: list[stack.Proc] = []
    try:
        procs.append(stack.start_dynamo_mocker(dynamo_python, model_dir, trace, kv_dir, logs))
        frontend = stack.start_dynamo_frontend(dynamo_python, kv_dir, logs)
        procs.append(frontend)
        stack.wait_ready(procs, frontend.base_url, stack.MODEL_NAME)
        yield Dynamo(
            dynamo_python,
            stack.site_packages(dynamo_python),
            kv_dir,
            frontend.base_url,
            stack.dynamo_env(kv_dir),
        )
    finally:
        for proc in reversed(procs):
            proc.stop()


def _shakedown(name: str, work_dir: Path, **kwargs: Any) -> Iterator[str]:
    proc = stack.start_shakedown(log_dir=work_dir / "logs", name=name, **kwargs)
    try:
        yield proc.base_url
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def shakedown_mocker(model_dir: Path, trace: Path, work_dir: Path) -> Iterator[str]:
    """(a) shakedown's loopback driven by shakedown's own mocker replaying the same trace."""
    yield from _shakedown("shakedown-mocker", work_dir, model_dir=model_dir, trace=trace)


@pytest.fixture(scope="session")
def shakedown_via_dynamo(model_dir: Path, dynamo: Dynamo, work_dir: Path) -> Iterator[str]:
    """(b) shakedown's loopback driven by the real Dynamo mocker through the Dynamo adapter."""
    env = {**dynamo.env, "SHAKEDOWN_DYNAMO_ENDPOINT": stack.ENDPOINT}
    yield from _shakedown(
        "shakedown-via-dynamo",
        work_dir,
        model_dir=model_dir,
        engine="shakedown.integrations.dynamo:engine",
        extra_env=env,
        dyn_site=dynamo.site,
    )


@pytest.fixture(scope="session")
def shakedown_no_tool_parser(model_dir: Path, trace: Path, work_dir: Path) -> Iterator[str]:
    """shakedown's mocker with the tool-call parser turned off: parity must fail."""
    yield from _shakedown(
        "shakedown-no-tools", work_dir, model_dir=model_dir, trace=trace, tool_call_parser=None
    )


@pytest.fixture()
def dynamo_core(dynamo: Dynamo, work_dir: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """`dynamo._core` importable here, and this process's DYN_* env pointed at the stack.

    Only the `dynamo` package is put on sys.path (through a directory holding a link to
    it), so none of the Dynamo venv's other packages can shadow ours.
    """
    only = work_dir / "dynamo-only"
    if not only.exists():
        only.mkdir()
        (only / "dynamo").symlink_to(Path(dynamo.site) / "dynamo")
    monkeypatch.syspath_prepend(str(only))
    for key in [k for k in os.environ if k.startswith("DYN_")]:
        monkeypatch.delenv(key)
    for key, value in dynamo.env.items():
        if key.startswith("DYN_"):
            monkeypatch.setenv(key, value)
    import dynamo._core as core

    return core


FAILING_MODEL = "failing"


@pytest.fixture(scope="session")
def dynamo_failing(dynamo: Dynamo, model_dir: Path, work_dir: Path) -> Iterator[str]:
    """A Dynamo Python worker running failing_engine behind the Dynamo frontend."""
    here = Path(__file__).resolve().parent
    argv = [str(dynamo.python), str(here / "dynamo_worker.py"), str(model_dir), FAILING_MODEL]
    worker = stack.spawn("dynamo-failing-worker", argv, dynamo.env, work_dir / "logs")
    try:
        stack.wait_ready([worker], dynamo.base_url, FAILING_MODEL)
        yield dynamo.base_url
    finally:
        worker.stop()


@pytest.fixture(scope="session")
def shakedown_failing(model_dir: Path, work_dir: Path) -> Iterator[str]:
    """shakedown serving the same failing_engine."""
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    yield from _shakedown(
        "shakedown-failing",
        work_dir,
        model_dir=model_dir,
        model=FAILING_MODEL,
        engine="failing_engine:generate",
        extra_env={"PYTHONPATH": path},
    )
