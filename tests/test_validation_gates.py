"""Exec gates as real subprocesses and URL gates against a real local sidecar."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import ssl
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from shakedown.validation import ExecGate, Gate, GateResult, UrlGate, parse_gates
from shakedown.validation.gates import GateContext, run_gates
from validation_helpers import (
    RawSidecar,
    Sidecar,
    free_port,
    never_answer,
    process_gone,
    py,
    send,
    trickle,
    wait_for_file,
)


@pytest.fixture
def ctx(tmp_path: Path) -> GateContext:
    return GateContext(
        base_url="http://127.0.0.1:1/v1", model="m", api_key="secret", log_dir=tmp_path / "logs"
    )


Run = Callable[..., list[GateResult]]


@pytest.fixture(params=[False, True], ids=["sequential", "parallel"])
def run(request: pytest.FixtureRequest) -> Run:
    """run_gates in both modes: the same gate must get the same verdict either way."""

    def run(
        gates: Sequence[Gate],
        ctx: GateContext,
        *,
        parallel: bool | None = None,
        deadline: float | None = None,
        cancel: threading.Event | None = None,
    ) -> list[GateResult]:
        return run_gates(
            gates,
            ctx,
            parallel=request.param if parallel is None else parallel,
            deadline=deadline,
            cancel=cancel or threading.Event(),
        )

    return run


def test_exec_pass_sees_the_endpoint_env(ctx: GateContext, run: Run) -> None:
    code = (
        "import os; print(os.environ['OPENAI_BASE_URL'], os.environ['DYN_VALIDATION_MODEL'],"
        " os.environ['OPENAI_API_KEY'], os.environ['EXTRA'],"
        " 'DYN_WORKER_VALIDATION_GATES' in os.environ)"
    )
    [result] = run([ExecGate("env", tuple(py(code)), env={"EXTRA": "x"})], ctx)
    assert result.outcome == "passed" and result.exit_code == 0
    assert result.log_tail.strip() == "http://127.0.0.1:1/v1 m secret x False"
    assert Path(result.log_path).read_text() == result.log_tail


def test_exec_fail_keeps_exit_code_and_log_tail(ctx: GateContext, run: Run) -> None:
    code = (
        "import sys; print('x' * 10000); print('template mismatch', file=sys.stderr); sys.exit(3)"
    )
    [result] = run([ExecGate("fail", tuple(py(code)))], ctx)
    assert (result.outcome, result.exit_code, result.reason) == ("failed", 3, "exit status 3")
    assert result.log_tail.endswith("template mismatch\n")
    assert len(result.log_tail) <= 4096


def test_exec_crash_reports_the_signal(ctx: GateContext, run: Run) -> None:
    [result] = run([ExecGate("crash", tuple(py("import os; os.abort()")))], ctx)
    assert result.outcome == "failed"
    assert result.reason == "killed by signal SIGABRT"


def test_missing_command_fails(ctx: GateContext, run: Run) -> None:
    [result] = run([ExecGate("nope", ("/nonexistent/gate",))], ctx)
    assert result.outcome == "failed" and "could not start" in result.reason


def test_timeout_kills_the_gate_and_its_children(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
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
    ctx: GateContext, run: Run, tmp_path: Path
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


def test_in_order_stops_at_first_failure(ctx: GateContext, run: Run) -> None:
    gates = [
        ExecGate("a", tuple(py("pass"))),
        ExecGate("b", tuple(py("raise SystemExit(1)"))),
        ExecGate("c", tuple(py("pass"))),
    ]
    results = run(gates, ctx, parallel=False)
    assert [r.outcome for r in results] == ["passed", "failed", "skipped"]
    assert results[2].reason == "not run: gate 'b' failed"


def test_parallel_runs_all_at_once(ctx: GateContext, run: Run, tmp_path: Path) -> None:
    # Each gate checks in and passes only once all three have: possible only side by side.
    code = (
        "import pathlib, sys, time\n"
        f"room = pathlib.Path({str(tmp_path)!r})\n"
        "(room / sys.argv[1]).touch()\n"
        "end = time.monotonic() + 10\n"
        "while len(list(room.glob('in-*'))) < 3:\n"
        "    if time.monotonic() > end: sys.exit('alone')\n"
        "    time.sleep(0.01)\n"
    )
    gates = [ExecGate(str(i), (*py(code), f"in-{i}")) for i in range(3)]
    gates.append(ExecGate("bad", tuple(py("raise SystemExit(2)"))))
    results = run(gates, ctx, parallel=True)
    assert [r.name for r in results] == ["0", "1", "2", "bad"]
    assert [r.outcome for r in results] == ["passed"] * 3 + ["failed"], results


def test_overall_deadline_bounds_gates(ctx: GateContext, run: Run) -> None:
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


def test_url_gate_200_passes_and_gets_the_coordinates(
    ctx: GateContext, run: Run, sidecar: Sidecar
) -> None:
    [result] = run([UrlGate("side", sidecar.url, timeout_s=5)], ctx)
    assert (result.outcome, result.http_status) == ("passed", 200)
    assert sidecar.bodies == [
        {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "secret"}
    ]


def test_url_gate_500_fails_with_the_body(ctx: GateContext, run: Run, sidecar: Sidecar) -> None:
    sidecar.status = 500
    [result] = run([UrlGate("side", sidecar.url, timeout_s=5)], ctx)
    assert (result.outcome, result.http_status) == ("failed", 500)
    assert result.log_tail == "chat template is wrong"


def test_url_gate_waits_for_a_late_sidecar(ctx: GateContext, run: Run) -> None:
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


def test_url_gate_fails_when_the_sidecar_never_starts(ctx: GateContext, run: Run) -> None:
    port = free_port()
    [result] = run([UrlGate("never", f"http://127.0.0.1:{port}/v", timeout_s=0.6)], ctx)
    assert result.outcome == "failed"
    assert result.reason.startswith("timed out after 0.6s; the sidecar refused")
    assert 0.5 < result.duration_s < 2


def test_a_gate_ignoring_sigterm_is_killed(
    ctx: GateContext, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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


# --- a gate that cannot run is a failed gate, never a missing one -------------------------


@pytest.mark.parametrize(
    ("gate", "words"),
    [
        (UrlGate("port-range", "http://127.0.0.1:99999/v"), "Port out of range"),
        (UrlGate("port-text", "http://127.0.0.1:abc/v"), "could not be cast to integer"),
        (ExecGate("nul-argv", ("true", "a\0b")), "embedded null byte"),
        (ExecGate("nul-env", ("true",), env={"A": "b\0"}), "embedded null byte"),
        (ExecGate("eq-env", ("true",), env={"A=B": "c"}), "illegal environment variable name"),
    ],
    ids=lambda v: v.name if isinstance(v, ExecGate | UrlGate) else "",
)
def test_a_gate_that_cannot_run_fails_with_the_reason(
    ctx: GateContext, run: Run, gate: Gate, words: str
) -> None:
    # Settings like these are refused when the configuration is read; gates built directly
    # (or a bug) must still end with a verdict, not vanish from the results.
    results = run([ExecGate("ok", ("true",)), gate], ctx)
    assert [(r.name, r.outcome) for r in results] == [("ok", "passed"), (gate.name, "failed")]
    assert words in results[1].reason


def test_an_unusable_log_directory_fails_each_exec_gate(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    bad = GateContext(ctx.base_url, ctx.model, ctx.api_key, log_dir=not_a_dir / "logs")
    results = run([ExecGate("a", ("true",)), ExecGate("b", ("true",))], bad, parallel=True)
    assert [r.outcome for r in results] == ["failed", "failed"]
    assert "NotADirectoryError" in results[0].reason


def test_an_exception_inside_a_parallel_gate_thread_is_that_gates_failure(
    ctx: GateContext, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shakedown.validation import gates as gates_module

    real = gates_module.run_exec_gate

    def flaky(gate: ExecGate, *args: object, **kwargs: object) -> GateResult:
        if gate.name == "boom":
            raise SystemExit("injected")  # not even an Exception
        return real(gate, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gates_module, "run_exec_gate", flaky)
    results = run([ExecGate("boom", ("true",)), ExecGate("fine", ("true",))], ctx, parallel=True)
    assert [(r.name, r.outcome) for r in results] == [("boom", "failed"), ("fine", "passed")]
    assert "SystemExit('injected')" in results[0].reason


# --- exec gates: environment and logs ---------------------------------------------------------

ENV_DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"


def gate_env(run: Run, ctx: GateContext, tmp_path: Path, **gate: object) -> dict[str, str]:
    out = tmp_path / "env.json"
    [result] = run([ExecGate("env", (*py(ENV_DUMP), str(out)), **gate)], ctx)  # type: ignore[arg-type]
    assert result.outcome == "passed", result.log_tail
    env: dict[str, str] = json.loads(out.read_text())
    return env


@pytest.fixture
def secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("DYN_VALIDATION_EXPECT_TOOLS", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "the-worker-s-own-key")


@pytest.mark.usefixtures("secrets_in_env")
def test_exec_gates_get_an_allow_listed_environment(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
    env = gate_env(run, ctx, tmp_path, env={"EVAL_SET": "smoke"})
    assert "HF_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PATH"] == os.environ["PATH"] and env["LC_ALL"] == "C.UTF-8"
    assert env["DYN_VALIDATION_EXPECT_TOOLS"] == "1" and env["EVAL_SET"] == "smoke"
    assert env["OPENAI_API_KEY"] == "secret"  # the endpoint's token, never the worker's own
    named = gate_env(run, ctx, tmp_path, pass_env=("HF_TOKEN",))
    assert named["HF_TOKEN"] == "hf-secret" and "AWS_SECRET_ACCESS_KEY" not in named


@pytest.mark.usefixtures("secrets_in_env")
def test_inheriting_the_whole_environment_is_an_opt_in(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
    per_gate = gate_env(run, ctx, tmp_path, inherit_env=True)
    assert per_gate["AWS_SECRET_ACCESS_KEY"] == "aws-secret"
    assert per_gate["OPENAI_API_KEY"] == "secret"
    everyone = dataclasses.replace(ctx, inherit_env=True)
    assert gate_env(run, everyone, tmp_path)["HF_TOKEN"] == "hf-secret"


def test_logs_are_private_and_one_per_gate(ctx: GateContext, run: Run) -> None:
    # Names that sanitise alike still get a log each.
    gates = [ExecGate(name, tuple(py(f"print({name!r})"))) for name in ("a/b", "a_b", "a?b")]
    results = run(gates, ctx)
    paths = [Path(r.log_path) for r in results if r.log_path]
    assert len(set(paths)) == 3
    assert [path.read_text() for path in paths] == ["a/b\n", "a_b\n", "a?b\n"]
    assert stat.S_IMODE(ctx.log_dir.stat().st_mode) == 0o700
    assert {stat.S_IMODE(path.stat().st_mode) for path in paths} == {0o600}


def test_a_symlink_where_a_log_goes_is_not_followed(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
    [first] = run([ExecGate("g", tuple(py("print('one')")))], ctx)
    log_path = Path(first.log_path or "")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    log_path.unlink()
    log_path.symlink_to(victim)
    [again] = run([ExecGate("g", tuple(py("print('two')")))], ctx)
    assert again.outcome == "passed" and again.log_path == str(log_path)
    assert victim.read_text() == "precious\n"
    assert not log_path.is_symlink() and log_path.read_text() == "two\n"


def test_a_symlinked_log_directory_is_refused(ctx: GateContext, run: Run, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "linked-logs"
    link.symlink_to(elsewhere)
    linked = dataclasses.replace(ctx, log_dir=link)
    [result] = run([ExecGate("g", ("true",))], linked)
    assert result.outcome == "failed" and "could not run" in result.reason
    assert list(elsewhere.iterdir()) == []


def test_a_gate_log_is_capped_and_keeps_its_tail(
    ctx: GateContext, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shakedown.validation import gates as gates_module

    monkeypatch.setattr(gates_module, "LOG_CAP_BYTES", 64 * 1024)
    code = (
        "import sys\n"
        "for i in range(20000): print(f'line {i:05d} ' + 'x' * 40)\n"
        "print('the last words', file=sys.stderr); sys.exit(1)\n"
    )
    [result] = run([ExecGate("chatty", tuple(py(code)))], ctx)
    assert result.outcome == "failed" and result.log_tail.endswith("the last words\n")
    log = Path(result.log_path or "").read_bytes()
    assert len(log) <= 64 * 1024 + 65536  # the cap plus at most one read from the pipe
    assert log.startswith(b"[shakedown: the first ") and b"bytes of this log were dropped]" in log
    assert b"line 19999 " in log and b"line 00000 " not in log


def test_a_descendant_holding_the_output_open_does_not_hold_the_gate(
    ctx: GateContext, run: Run, tmp_path: Path
) -> None:
    # The child leaves the gate's process group (new session) with the gate's stdout open.
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('done')\n"
    )
    try:
        [result] = run([ExecGate("escapee", tuple(py(code)), timeout_s=30)], ctx)
        assert result.outcome == "passed" and result.log_tail == "done\n"
    finally:
        os.kill(int(wait_for_file(pid_file)), signal.SIGKILL)


# --- URL gates: the deadline bounds the whole exchange; only a whole 200 passes ----------------

OK_ANSWER = b'HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{"ok": true}'


@pytest.fixture
def raw_sidecars() -> Iterator[list[RawSidecar]]:
    made: list[RawSidecar] = []
    yield made
    for sidecar in made:
        sidecar.stop()


def test_url_gate_deadline_bounds_a_trickling_sidecar(
    ctx: GateContext, run: Run, raw_sidecars: list[RawSidecar]
) -> None:
    # A whole, valid 200, a byte every 50 ms: about 3 s in all, far past the gate's 0.5 s.
    sidecar = RawSidecar(trickle(OK_ANSWER, 0.05))
    raw_sidecars.append(sidecar)
    [result] = run([UrlGate("slow", sidecar.url, timeout_s=0.5)], ctx)
    assert result.outcome == "failed"
    assert result.reason == "timed out after 0.5s waiting for the sidecar's whole answer"


def test_url_gate_overall_deadline_bounds_the_exchange(
    ctx: GateContext, run: Run, raw_sidecars: list[RawSidecar]
) -> None:
    sidecar = RawSidecar(trickle(OK_ANSWER, 0.05))
    raw_sidecars.append(sidecar)
    [result] = run(
        [UrlGate("slow", sidecar.url, timeout_s=60)], ctx, deadline=time.monotonic() + 0.5
    )
    assert result.outcome == "failed"
    assert result.reason.startswith("the overall validation deadline passed")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"ok": tr', "before the end of the body"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n", "cut short"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", "malformed response headers"),
        (b"HTTP/1.1 200 OK\r\nServer: x\r\n", "neither Content-Length nor chunked"),
        (b"HTTP/1.0 200 OK\r\n\r\nok", "neither Content-Length nor chunked"),
        (b"", "closed connection without response"),
    ],
    ids=["content-length", "chunked", "mid-header", "before-blank-line", "unframed", "nothing"],
)
def test_url_gate_a_200_cut_short_fails(
    ctx: GateContext, run: Run, raw_sidecars: list[RawSidecar], answer: bytes, words: str
) -> None:
    sidecar = RawSidecar(send(answer))
    raw_sidecars.append(sidecar)
    [result] = run([UrlGate("cut", sidecar.url, timeout_s=5)], ctx)
    assert result.outcome == "failed", result
    assert result.reason.startswith("request to the sidecar failed") and words in result.reason


def test_url_gate_whole_answers_pass(
    ctx: GateContext, run: Run, raw_sidecars: list[RawSidecar]
) -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    for answer in (OK_ANSWER, chunked):
        sidecar = RawSidecar(send(answer))
        raw_sidecars.append(sidecar)
        [result] = run([UrlGate("whole", sidecar.url, timeout_s=5)], ctx)
        assert result.outcome == "passed", (answer, result)


def test_url_gate_over_ipv6_loopback(ctx: GateContext, run: Run) -> None:
    sidecar = Sidecar(host="::1")
    try:
        assert sidecar.url.startswith("http://[::1]:")
        [gate] = parse_gates(f"url:{sidecar.url}")
        [result] = run([gate], ctx)
    finally:
        sidecar.stop()
    assert result.outcome == "passed" and len(sidecar.bodies) == 1


def test_stopping_ends_a_url_gate_stuck_on_a_silent_sidecar(
    ctx: GateContext, run: Run, raw_sidecars: list[RawSidecar]
) -> None:
    sidecar = RawSidecar(never_answer)
    raw_sidecars.append(sidecar)
    cancel = threading.Event()
    results: list[list[GateResult]] = []
    thread = threading.Thread(
        target=lambda: results.append(
            run([UrlGate("silent", sidecar.url, timeout_s=600)], ctx, cancel=cancel)
        )
    )
    thread.start()
    assert sidecar.request_seen.wait(10)
    cancel.set()
    thread.join(10)
    assert not thread.is_alive()
    [[result]] = results
    assert (result.outcome, result.reason) == ("failed", "validation was stopped")


def test_url_gate_over_https(
    ctx: GateContext, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts only this certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    sidecar = Sidecar(tls=tls)
    try:
        url = sidecar.url.replace("127.0.0.1", "localhost")
        [result] = run([UrlGate("tls", url, timeout_s=10)], ctx)
    finally:
        sidecar.stop()
    assert (result.outcome, result.http_status) == ("passed", 200), result
    assert sidecar.bodies[0]["api_key"] == "secret"
