"""A test run stopped with SIGTERM still stops what its fixtures started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path

    import pytest

    @pytest.fixture(scope="session")
    def child():
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        yield proc
        proc.kill()
        proc.wait()

    def test_waits(child):
        Path("child.pid").write_text(str(child.pid))
        time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_sigterm_runs_session_finalizers(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "sigterm_teardown",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    pid_file = tmp_path / "child.pid"
    child = 0
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), run.communicate(timeout=10)[0].decode(errors="replace")
        child = int(pid_file.read_text())
        assert _alive(child)
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=30)[0].decode(errors="replace")
        assert "KeyboardInterrupt: signal SIGTERM" in out, out
        assert not _alive(child)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
