"""Exec gates as real subprocesses and URL gates against a real local sidecar."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shakedown.validation import ExecGate, UrlGate
from shakedown.validation.gates import GateContext, run_gates
from validation_helpers import Sidecar, free_port, process_gone, py, wait_for_file


@pytest.fixture
def ctx(tmp_path: Path) -> GateContext:
    return GateContext(
        base_url="http://127.0.0.1:1/v1", model="m", api_key="secret", log_dir=tmp_path / "logs"
    )


def run(gates: list[ExecGate | UrlGate], ctx: GateContext, **kw: object) -> list:  # type: ignore[type-arg]
    return run_gates(
        gates,
        ctx,
        parallel=bool(kw.get("parallel", False)),
        deadline=kw.get("deadline"),  # type: ignore[arg-type]
        cancel=threading.Event(),
    )


def test_exec_pass_sees_the_endpoint_env(ctx: GateContext) -> None:
    code = (
        "import os; print(os.environ['OPENAI_BASE_URL'], os.environ['DYN_VALIDATION_MODEL'],"
        " os.environ['OPENAI_API_KEY'], os.environ['EXTRA'],"
        " 'DYN_WORKER_VALIDATION_GATES' in os.environ)"
    )
    [result] = run([ExecGate("env", tuple(py(code)), env={"EXTRA": "x"})], ctx)
    assert result.outcome == "passed" and result.exit_code == 0
    assert result.log_tail.strip() == "http://127.0.0.1:1/v1 m secret x False"
    assert Path(result.log_path).read_text() == result.log_tail


def test_exec_fail_keeps_exit_code_and_log_tail(ctx: GateContext) -> None:
    code = (
        "import sys; print('x' * 10000); print('template mismatch', file=sys.stderr); sys.exit(3)"
    )
    [result] = run([ExecGate("fail", tuple(py(code)))], ctx)
    assert (result.outcome, result.exit_code, result.reason) == ("failed", 3, "exit status 3")
    assert result.log_tail.endswith("template mismatch\n")
    assert len(result.log_tail) <= 4096


def test_exec_crash_reports_the_signal(ctx: GateContext) -> None:
    [result] = run([ExecGate("crash", tuple(py("import os; os.abort()")))], ctx)
    assert result.outcome == "failed"
    assert result.reason == "killed by signal SIGABRT"


def test_missing_command_fails(ctx: GateContext) -> None:
    [result] = run([ExecGate("nope", ("/nonexistent/gate",))], ctx)
    assert result.outcome == "failed" and "could not start" in result.reason


def test_timeout_kills_the_gate_and_its_children(ctx: GateContext, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import subprocess, sys, time, os\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    [result] = run([ExecGate("slow", tuple(py(code)), timeout_s=1.0)], ctx)
    assert time.monotonic() - start < 5
    assert result.outcome == "failed" and result.reason == "timed out after 1s"
    gate_pid, child_pid = map(int, wait_for_file(pids).split())
    assert process_gone(gate_pid) and process_gone(child_pid)


def test_children_left_behind_by_a_passing_gate_are_killed(
    ctx: GateContext, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
    )
    [result] = run([ExecGate("leaky", tuple(py(code)))], ctx)
    assert result.outcome == "passed"
    assert process_gone(int(wait_for_file(pid_file)))


def test_in_order_stops_at_first_failure(ctx: GateContext) -> None:
    gates = [
        ExecGate("a", tuple(py("pass"))),
        ExecGate("b", tuple(py("raise SystemExit(1)"))),
        ExecGate("c", tuple(py("pass"))),
    ]
    results = run(gates, ctx)
    assert [r.outcome for r in results] == ["passed", "failed", "skipped"]
    assert results[2].reason == "not run: gate 'b' failed"


def test_parallel_runs_all_at_once(ctx: GateContext) -> None:
    gates = [ExecGate(str(i), tuple(py("import time; time.sleep(0.5)"))) for i in range(3)]
    gates.append(ExecGate("bad", tuple(py("raise SystemExit(2)"))))
    start = time.monotonic()
    results = run(gates, ctx, parallel=True)
    assert time.monotonic() - start < 1.4  # sequential would take 1.5 s and more
    assert [r.name for r in results] == ["0", "1", "2", "bad"]
    assert [r.outcome for r in results] == ["passed"] * 3 + ["failed"]


def test_overall_deadline_bounds_gates(ctx: GateContext) -> None:
    [result] = run(
        [ExecGate("slow", tuple(py("import time; time.sleep(30)")), timeout_s=30)],
        ctx,
        deadline=time.monotonic() + 0.5,
    )
    assert result.reason == "the overall validation deadline passed"


@pytest.fixture
def sidecar() -> Iterator[Sidecar]:
    server = Sidecar()
    yield server
    server.stop()


def test_url_gate_200_passes_and_gets_the_coordinates(ctx: GateContext, sidecar: Sidecar) -> None:
    [result] = run([UrlGate("side", sidecar.url, timeout_s=5)], ctx)
    assert (result.outcome, result.http_status) == ("passed", 200)
    assert sidecar.bodies == [
        {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "secret"}
    ]


def test_url_gate_500_fails_with_the_body(ctx: GateContext, sidecar: Sidecar) -> None:
    sidecar.status = 500
    [result] = run([UrlGate("side", sidecar.url, timeout_s=5)], ctx)
    assert (result.outcome, result.http_status) == ("failed", 500)
    assert result.log_tail == "chat template is wrong"


def test_url_gate_waits_for_a_late_sidecar(ctx: GateContext) -> None:
    port = free_port()
    late: list[Sidecar] = []
    timer = threading.Timer(0.4, lambda: late.append(Sidecar(port=port)))
    timer.start()
    try:
        [result] = run([UrlGate("late", f"http://127.0.0.1:{port}/validate", timeout_s=5)], ctx)
    finally:
        timer.join()
        for server in late:
            server.stop()
    assert result.outcome == "passed"
    assert result.duration_s >= 0.3


def test_url_gate_fails_when_the_sidecar_never_starts(ctx: GateContext) -> None:
    port = free_port()
    [result] = run([UrlGate("never", f"http://127.0.0.1:{port}/v", timeout_s=0.6)], ctx)
    assert result.outcome == "failed"
    assert result.reason.startswith("timed out after 0.6s; the sidecar refused")
    assert 0.5 < result.duration_s < 2


def test_a_gate_ignoring_sigterm_is_killed(
    ctx: GateContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shakedown.validation import gates

    monkeypatch.setattr(gates, "KILL_GRACE_S", 0.2)
    pid_file = tmp_path / "pid"
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    [result] = run([ExecGate("stubborn", tuple(py(code)), timeout_s=0.5)], ctx)
    assert result.exit_code == -9 and result.reason == "timed out after 0.5s"
    assert process_gone(int(wait_for_file(pid_file)))
