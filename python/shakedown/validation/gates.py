"""Running gates: exec gates as process groups, URL gates as a POST to a sidecar.

Gates run on plain threads, never on the worker's event loop: an engine's busy loop must not
delay a gate's timeout, and a gate must not stall the engine.

Every gate ends with a verdict: whatever goes wrong while running one (a bad setting, a bug, an
exception in its thread) is that gate's failure, never a gate missing from the results.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from shakedown import httpclient

from .config import GATES_VAR, ExecGate, Gate, UrlGate
from .files import create_private_file, open_private_dir
from .report import GateResult

LOG_TAIL_BYTES = 4096
# A gate's log file keeps at most this much; past it the oldest half is dropped.
LOG_CAP_BYTES = 1 << 20
# A sidecar's answer is read up to this size; a longer one fails the gate.
MAX_ANSWER_BYTES = 1 << 20
# After SIGTERM a gate's group gets this long to exit before SIGKILL.
KILL_GRACE_S = 2.0
# Once a gate's group is gone, how long its output pipe may stay open (held by a descendant
# that left the group) before the rest is dropped.
DRAIN_S = 1.0
_POLL_S = 0.05
_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 2.0

# What an exec gate gets of the worker's environment unless it inherits it all: enough to find
# programs, run Python and speak TLS, never the worker's credentials.
ALLOWED_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "TZ",
        "LANG",
        "LANGUAGE",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)
# Locale settings, the interpreter's (PYTHONPATH, PYTHONUNBUFFERED, ...), and the settings
# meant for gates (DYN_VALIDATION_EXPECT_TOOLS, ...).
ALLOWED_ENV_PREFIXES = ("LC_", "PYTHON", "DYN_VALIDATION_")


@dataclass(frozen=True)
class GateContext:
    """What every gate is told about the endpoint it validates."""

    base_url: str
    model: str
    api_key: str
    log_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    inherit_env: bool = False
    """Every exec gate gets the worker's whole environment (DYN_WORKER_VALIDATION_INHERIT_ENV)."""

    def injected_env(self) -> dict[str, str]:
        return {
            **self.extra_env,
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
            "DYN_VALIDATION_MODEL": self.model,
        }


def gate_environment(
    gate: ExecGate, ctx: GateContext, environ: Mapping[str, str]
) -> dict[str, str]:
    """The environment ``gate``'s command runs with, taken from the worker's ``environ``."""
    if gate.inherit_env or ctx.inherit_env:
        inherited = dict(environ)
    else:
        inherited = {
            name: value
            for name, value in environ.items()
            if name in ALLOWED_ENV or name.startswith(ALLOWED_ENV_PREFIXES) or name in gate.pass_env
        }
    # A gate that is itself a worker must not start validating a worker of its own.
    inherited.pop(GATES_VAR, None)
    return {**inherited, **gate.env, **ctx.injected_env()}


class _Deadline:
    def __init__(self, gate_timeout_s: float, overall: float | None) -> None:
        self.start = time.monotonic()
        gate_end = self.start + gate_timeout_s
        self.end = gate_end if overall is None else min(gate_end, overall)
        self.gate_timeout_s = gate_timeout_s
        self.overall_first = overall is not None and overall < gate_end

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def reason(self) -> str:
        if self.overall_first:
            return "the overall validation deadline passed"
        return f"timed out after {self.gate_timeout_s:g}s"


def run_gates(
    gates: Sequence[Gate],
    ctx: GateContext,
    *,
    parallel: bool,
    deadline: float | None,
    cancel: threading.Event,
) -> list[GateResult]:
    """Run gates in order (stopping at the first failure) or all at once.

    Returns exactly one result per gate, in gate order. ``deadline`` is a
    ``time.monotonic()`` instant that bounds every gate; ``cancel`` stops them all early
    (their groups are killed).
    """
    log_names = [f"{index + 1:02d}-{_file_safe(gate.name)}.log" for index, gate in enumerate(gates)]
    if not parallel:
        results: list[GateResult] = []
        for gate, log_name in zip(gates, log_names, strict=True):
            if results and not results[-1].passed:
                results.append(_skipped(gate, f"not run: gate {results[-1].name!r} failed"))
            elif cancel.is_set():
                results.append(_skipped(gate, "not run: validation was stopped"))
            else:
                results.append(_run_guarded(gate, ctx, log_name, deadline, cancel))
        return results
    slots: list[GateResult | None] = [None] * len(gates)

    def run_slot(index: int) -> None:
        slots[index] = _run_guarded(gates[index], ctx, log_names[index], deadline, cancel)

    threads = [
        threading.Thread(target=run_slot, args=(i,), name=f"shakedown-gate-{i}", daemon=True)
        for i in range(len(gates))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [
        slot if slot is not None else _failed(gate, "the gate's thread ended without a verdict")
        for gate, slot in zip(gates, slots, strict=True)
    ]


def _run_guarded(
    gate: Gate, ctx: GateContext, log_name: str, deadline: float | None, cancel: threading.Event
) -> GateResult:
    start = time.monotonic()
    try:
        if isinstance(gate, ExecGate):
            return run_exec_gate(gate, ctx, log_name, deadline=deadline, cancel=cancel)
        return run_url_gate(gate, ctx, deadline=deadline, cancel=cancel)
    except BaseException as exc:  # any way a gate ends without a verdict fails it
        return _failed(gate, f"the gate could not run: {exc!r}", time.monotonic() - start)


def _kind(gate: Gate) -> Literal["exec", "url"]:
    return "exec" if isinstance(gate, ExecGate) else "url"


def _skipped(gate: Gate, reason: str) -> GateResult:
    return GateResult(
        name=gate.name, kind=_kind(gate), outcome="skipped", duration_s=0.0, reason=reason
    )


def _failed(gate: Gate, reason: str, duration_s: float = 0.0) -> GateResult:
    return GateResult(
        name=gate.name, kind=_kind(gate), outcome="failed", duration_s=duration_s, reason=reason
    )


class GateLog:
    """A gate's output file, capped at ``cap`` bytes: the oldest half goes when it is full, so
    what a failing gate printed last always survives."""

    def __init__(self, fd: int, path: Path, cap: int) -> None:
        self.fd = fd
        self.path = path
        self.cap = cap
        self.size = 0
        self.dropped = 0

    @classmethod
    def create(cls, log_dir: Path, name: str, cap: int) -> GateLog:
        dir_fd = open_private_dir(log_dir)
        try:
            return cls(create_private_file(dir_fd, name), log_dir / name, cap)
        finally:
            os.close(dir_fd)

    def write(self, data: bytes) -> None:
        self._write_at(self.size, data)
        self.size += len(data)
        if self.size > self.cap:
            keep = os.pread(self.fd, self.cap // 2, self.size - self.cap // 2)
            self.dropped += self.size - len(keep)
            marker = f"[shakedown: the first {self.dropped} bytes of this log were dropped]\n"
            kept = marker.encode() + keep
            self._write_at(0, kept)
            os.ftruncate(self.fd, len(kept))
            self.size = len(kept)

    def _write_at(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, offset)
            view, offset = view[written:], offset + written

    def tail(self) -> str:
        start = max(0, self.size - LOG_TAIL_BYTES)
        text = os.pread(self.fd, self.size - start, start).decode("utf-8", errors="replace")
        if start > 0 and "\n" in text:
            text = text.split("\n", 1)[1]  # drop the partial first line
        return text

    def close(self) -> None:
        os.close(self.fd)


class _OutputPump:
    """Moves a gate's output from its pipe into its log while the gate runs (and as it dies)."""

    def __init__(self, read_fd: int, log: GateLog) -> None:
        os.set_blocking(read_fd, False)
        self.read_fd = read_fd
        self.log = log
        self.selector = selectors.DefaultSelector()
        self.selector.register(read_fd, selectors.EVENT_READ)
        self.open = True

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for output and log it; returns early once the pipe closed."""
        if not self.open:
            time.sleep(max(0.0, timeout))
            return
        if not self.selector.select(max(0.0, timeout)):
            return
        while True:
            try:
                data = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return
            if not data:
                self.open = False
                return
            self.log.write(data)

    def drain(self) -> None:
        end = time.monotonic() + DRAIN_S
        while self.open and time.monotonic() < end:
            self.pump(end - time.monotonic())

    def close(self) -> None:
        self.selector.close()
        os.close(self.read_fd)


def run_exec_gate(
    gate: ExecGate,
    ctx: GateContext,
    log_name: str,
    *,
    deadline: float | None,
    cancel: threading.Event,
) -> GateResult:
    """Run the gate's command in its own process group; exit 0 passes.

    Whatever the outcome, the whole group is killed afterwards, so helpers a gate forked and
    left behind do not outlive it. (A descendant that starts its own session escapes the
    group; nothing short of a cgroup can follow it.)
    """
    clock = _Deadline(gate.timeout_s, deadline)
    log = GateLog.create(ctx.log_dir, log_name, LOG_CAP_BYTES)
    try:
        return _run_process(gate, ctx, log, clock, cancel)
    finally:
        log.close()


def _run_process(
    gate: ExecGate, ctx: GateContext, log: GateLog, clock: _Deadline, cancel: threading.Event
) -> GateResult:
    def result(passed: bool, reason: str, exit_code: int | None) -> GateResult:
        return GateResult(
            name=gate.name,
            kind="exec",
            outcome="passed" if passed else "failed",
            duration_s=clock.elapsed(),
            reason=reason,
            exit_code=exit_code,
            log_tail=log.tail(),
            log_path=str(log.path),
        )

    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            list(gate.argv),
            env=gate_environment(gate, ctx, os.environ),
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        os.close(read_fd)
        return result(False, f"could not start {gate.argv[0]!r}: {exc}", None)
    finally:
        os.close(write_fd)  # the gate's processes hold the only write ends now
    output = _OutputPump(read_fd, log)
    try:
        stopped: str | None = None
        while (code := proc.poll()) is None:
            remaining = clock.remaining()
            if cancel.is_set() or remaining <= 0:
                stopped = "validation was stopped" if cancel.is_set() else clock.reason()
                break
            output.pump(min(_POLL_S, remaining))
        _kill_group(proc, output.pump)
        output.drain()
    finally:
        if proc.returncode is None:  # an exception above: never leave the group running
            _kill_group(proc, time.sleep)
        output.close()
    if stopped is not None:
        return result(False, stopped, proc.returncode)
    assert code is not None
    if code == 0:
        return result(True, "exit status 0", code)
    if code < 0:
        return result(False, f"killed by signal {_signal_name(-code)}", code)
    return result(False, f"exit status {code}", code)


def _kill_group(proc: subprocess.Popen[bytes], wait: Callable[[float], None]) -> None:
    """SIGTERM the gate's process group, then SIGKILL whatever is left, and reap the leader.

    ``wait(seconds)`` passes the time in between (pumping the gate's output meanwhile).
    """
    pgid = proc.pid  # start_new_session makes the gate its group's leader
    if not _signal_group(pgid, signal.SIGTERM):
        proc.poll()
        return
    end = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < end and _group_alive(pgid):
        proc.poll()  # reap the leader so it does not linger as a zombie group member
        wait(_POLL_S)
    _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """Whether any member of the group still runs (zombies, killed but unreaped, do not count)."""
    if not os.path.isdir("/proc"):
        return _signal_group(pgid, 0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _file_safe(name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return safe[:80].lstrip(".") or "gate"


def run_url_gate(
    gate: UrlGate, ctx: GateContext, *, deadline: float | None, cancel: threading.Event
) -> GateResult:
    """POST ``{"base_url","model","api_key"}`` to the sidecar; a whole 200 answer passes.

    Whole means framed (Content-Length or chunked) and received to its end: an answer that
    ends only when the connection closes cannot be told from a sidecar dying mid-answer.

    The gate's deadline bounds the whole exchange, however slowly the sidecar answers. A
    refused connection means the sidecar is not up yet, so it is retried with backoff until the
    deadline; every other outcome is final.
    """
    clock = _Deadline(gate.timeout_s, deadline)
    url = httpclient.parse_url(gate.url)
    body = orjson.dumps({"base_url": ctx.base_url, "model": ctx.model, "api_key": ctx.api_key})
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    attempts = 0
    backoff = _BACKOFF_START_S

    def result(ok: bool, reason: str, status: int | None = None, tail: str = "") -> GateResult:
        return GateResult(
            name=gate.name,
            kind="url",
            outcome="passed" if ok else "failed",
            duration_s=clock.elapsed(),
            reason=reason,
            http_status=status,
            log_tail=tail,
        )

    while True:
        remaining = clock.remaining()
        if cancel.is_set():
            return result(False, "validation was stopped")
        if remaining <= 0:
            return result(
                False, f"{clock.reason()}; the sidecar refused {attempts} connection attempt(s)"
            )
        attempts += 1
        try:
            answer = httpclient.request(
                "POST",
                url,
                timeout_s=remaining,
                body=body,
                headers=headers,
                cancel=cancel,
                max_body=MAX_ANSWER_BYTES,
                framed=True,
            )
        except ConnectionRefusedError:
            cancel.wait(min(backoff, max(0.0, clock.remaining())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
            continue
        except TimeoutError:
            return result(False, clock.reason() + " waiting for the sidecar's whole answer")
        except httpclient.Cancelled:
            return result(False, "validation was stopped")
        except OSError as exc:
            return result(False, f"request to the sidecar failed: {exc}")
        text = answer.body[:LOG_TAIL_BYTES].decode("utf-8", errors="replace")
        if answer.status == 200:
            return result(True, "HTTP 200", answer.status, text)
        return result(False, f"the sidecar answered HTTP {answer.status}", answer.status, text)
