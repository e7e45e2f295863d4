"""Running gates: exec gates as process groups, URL gates as a POST to a sidecar.

Gates run on plain threads, never on the worker's event loop: an engine's busy loop must not
delay a gate's timeout, and a gate must not stall the engine.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import orjson

from .config import GATES_VAR, ExecGate, Gate, UrlGate
from .report import GateResult

LOG_TAIL_BYTES = 4096
# After SIGTERM a gate's group gets this long to exit before SIGKILL.
KILL_GRACE_S = 2.0
_POLL_S = 0.05
_BACKOFF_START_S = 0.1
_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True)
class GateContext:
    """What every gate is told about the endpoint it validates."""

    base_url: str
    model: str
    api_key: str
    log_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {
            **self.extra_env,
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
            "DYN_VALIDATION_MODEL": self.model,
        }


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
    """Run gates in order (stopping at the first failure) or all at once; results keep gate order.

    ``deadline`` is a ``time.monotonic()`` instant that bounds every gate; ``cancel`` stops
    them all early (their group is killed).
    """
    if not parallel:
        results: list[GateResult] = []
        for gate in gates:
            if results and not results[-1].passed:
                results.append(_skipped(gate, f"not run: gate {results[-1].name!r} failed"))
            elif cancel.is_set():
                results.append(_skipped(gate, "not run: validation was stopped"))
            else:
                results.append(run_gate(gate, ctx, deadline=deadline, cancel=cancel))
        return results
    slots: list[GateResult | None] = [None] * len(gates)

    def run_slot(index: int) -> None:
        slots[index] = run_gate(gates[index], ctx, deadline=deadline, cancel=cancel)

    threads = [
        threading.Thread(target=run_slot, args=(i,), name=f"shakedown-gate-{i}", daemon=True)
        for i in range(len(gates))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [slot for slot in slots if slot is not None]


def run_gate(
    gate: Gate, ctx: GateContext, *, deadline: float | None, cancel: threading.Event
) -> GateResult:
    if isinstance(gate, ExecGate):
        return run_exec_gate(gate, ctx, deadline=deadline, cancel=cancel)
    return run_url_gate(gate, ctx, deadline=deadline, cancel=cancel)


def _skipped(gate: Gate, reason: str) -> GateResult:
    kind: Literal["exec", "url"] = "exec" if isinstance(gate, ExecGate) else "url"
    return GateResult(name=gate.name, kind=kind, outcome="skipped", duration_s=0.0, reason=reason)


def run_exec_gate(
    gate: ExecGate, ctx: GateContext, *, deadline: float | None, cancel: threading.Event
) -> GateResult:
    """Run the gate's command in its own process group; exit 0 passes.

    Whatever the outcome, the whole group is killed afterwards, so helpers a gate forked and
    left behind do not outlive it. (A descendant that starts its own session escapes the
    group; nothing short of a cgroup can follow it.)
    """
    clock = _Deadline(gate.timeout_s, deadline)
    ctx.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = ctx.log_dir / f"{_file_safe(gate.name)}.log"
    env = {**os.environ, **gate.env, **ctx.env()}
    # A gate that is itself a worker must not start validating a worker of its own.
    env.pop(GATES_VAR, None)

    def result(passed: bool, reason: str, exit_code: int | None) -> GateResult:
        return GateResult(
            name=gate.name,
            kind="exec",
            outcome="passed" if passed else "failed",
            duration_s=clock.elapsed(),
            reason=reason,
            exit_code=exit_code,
            log_tail=_tail(log_path),
            log_path=str(log_path),
        )

    with log_path.open("wb") as log:
        try:
            proc = subprocess.Popen(
                list(gate.argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return result(False, f"could not start {gate.argv[0]!r}: {exc}", None)
        try:
            while True:
                remaining = clock.remaining()
                if cancel.is_set() or remaining <= 0:
                    why = "validation was stopped" if cancel.is_set() else clock.reason()
                    _kill_group(proc)
                    return result(False, why, proc.returncode)
                try:
                    code = proc.wait(timeout=min(_POLL_S, remaining))
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            _kill_group(proc)
    if code == 0:
        return result(True, "exit status 0", code)
    if code < 0:
        return result(False, f"killed by signal {_signal_name(-code)}", code)
    return result(False, f"exit status {code}", code)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the gate's process group, then SIGKILL whatever is left, and reap the leader."""
    pgid = proc.pid  # start_new_session makes the gate its group's leader
    if not _signal_group(pgid, signal.SIGTERM):
        proc.poll()
        return
    end = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < end and _group_alive(pgid):
        proc.poll()  # reap the leader so it does not linger as a zombie group member
        time.sleep(_POLL_S)
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


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - LOG_TAIL_BYTES))
            data = log.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > LOG_TAIL_BYTES and "\n" in text:
        text = text.split("\n", 1)[1]  # drop the partial first line
    return text


def _file_safe(name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return safe[:80] or "gate"


def run_url_gate(
    gate: UrlGate, ctx: GateContext, *, deadline: float | None, cancel: threading.Event
) -> GateResult:
    """POST ``{"base_url","model","api_key"}`` to the sidecar; 200 passes.

    A refused connection means the sidecar is not up yet, so it is retried with backoff
    until the gate's timeout; every other outcome is final.
    """
    clock = _Deadline(gate.timeout_s, deadline)
    body = orjson.dumps({"base_url": ctx.base_url, "model": ctx.model, "api_key": ctx.api_key})
    parts = urlsplit(gate.url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
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
        conn_type = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_type(parts.hostname or "", parts.port, timeout=remaining)
        try:
            conn.request(
                "POST",
                path,
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            response = conn.getresponse()
            text = response.read(LOG_TAIL_BYTES).decode("utf-8", errors="replace")
            status = response.status
        except ConnectionRefusedError:
            cancel.wait(min(backoff, max(0.0, clock.remaining())))
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
            continue
        except TimeoutError:
            return result(False, clock.reason() + " waiting for the sidecar's answer")
        except (OSError, http.client.HTTPException) as exc:
            return result(False, f"request to the sidecar failed: {exc!r}")
        finally:
            conn.close()
        if status == 200:
            return result(True, "HTTP 200", status, text)
        return result(False, f"the sidecar answered HTTP {status}", status, text)
