"""Start and stop the processes a live parity run compares, on 127.0.0.1 only.

- the real Dynamo 1.6.1 mocker + frontend (file discovery, TCP request plane), run by the
  interpreter of a venv holding `ai-dynamo==1.6.1` (the repository's tools/dynamo_venv.sh
  builds one);
- `shakedown serve` driven by shakedown's own mocker, or by the Dynamo mocker through
  `shakedown.integrations.dynamo` (that process also sees the Dynamo venv's packages, added
  after its own so shakedown's dependencies win).

Every process gets its own process group; `Proc.stop()` signals the group, so children die too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
MODEL_NAME = "dsref"
ENDPOINT = "dynamo.backend.generate"
DYNAMO_MOCKER = Path(__file__).resolve().parent / "dynamo_mocker.py"
# openai-harmony (Dynamo's gpt_oss reasoning and harmony tool parsers) reads the Harmony
# encoding's vocab, `o200k_base.tiktoken`, from this directory instead of downloading it at
# first use; without it, offline, those parsers fall back to degraded modes.
HARMONY_VOCAB_VAR = "TIKTOKEN_ENCODINGS_BASE"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    base_url: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `grace_s`."""
        if self.popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace_s)
        # The leader may be gone while children linger in the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if self.popen.returncode is None:
            self.popen.wait(grace_s)


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """Within the block SIGTERM raises SystemExit, so the `with` blocks that started
    processes stop them on the way out (the default action would skip them and leave the
    frontend and mockers running). Main thread only."""

    def exit_now(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def site_packages(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def same_python_version(python: Path) -> bool:
    out = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() == sysconfig.get_python_version()


def dynamo_env(kv_dir: Path, harmony_vocab: Path | None = None) -> dict[str, str]:
    """File discovery under a private dir and every Dynamo listener on loopback; with
    `harmony_vocab` (a directory holding `o200k_base.tiktoken`), the Harmony encoding too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYN_")}
    if harmony_vocab is not None:
        env[HARMONY_VOCAB_VAR] = str(harmony_vocab)
    env.update(
        DYN_FILE_KV=str(kv_dir),
        DYN_DISCOVERY_BACKEND="file",
        DYN_REQUEST_PLANE="tcp",
        DYN_TCP_RPC_HOST=LOOPBACK,
        DYN_TCP_RESPONSE_STREAM_HOST=LOOPBACK,
        DYN_EVENT_PLANE_HOST=LOOPBACK,
        DYN_HTTP_RPC_HOST=LOOPBACK,
        DYN_SYSTEM_HOST=LOOPBACK,
        DYN_SELF_HOST_METADATA="0",
        DYN_LOG="warn",
    )
    return env


def spawn(name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with open(log, "wb") as f:
        popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(name, popen, log)


def _chat_ok(base_url: str, model: str) -> bool:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    ).encode()
    req = urllib.request.Request(
        f"{base_url}/v1/chat/completions", body, {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(procs: Sequence[Proc], base_url: str, model: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited during start-up:\n{p.log_tail()}")
        if _chat_ok(base_url, model):
            return
        time.sleep(0.3)
    tails = "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in procs)
    raise RuntimeError(f"{base_url} not ready after {timeout_s:.0f}s\n{tails}")


def start_dynamo_mocker(
    dyn_python: Path,
    model_dir: Path,
    trace: Path,
    kv_dir: Path,
    log_dir: Path,
    *,
    model: str = MODEL_NAME,
    speedup: float = 100.0,
    tool_call_parser: str | None = "hermes",
    reasoning_parser: str | None = "deepseek_r1",
    name: str = "dynamo-mocker",
) -> Proc:
    env = dynamo_env(kv_dir)
    env.update(
        PARITY_TOOL_CALL_PARSER=tool_call_parser or "",
        PARITY_REASONING_PARSER=reasoning_parser or "",
    )
    argv = [
        str(dyn_python), str(DYNAMO_MOCKER),
        "--model-path", str(model_dir), "--model-name", model,
        "--discovery-backend", "file", "--request-plane", "tcp",
        "--speedup-ratio", str(speedup),
        # No simulated prefix-cache hits: cached_tokens stays 0, as shakedown's mocker reports.
        "--no-enable-prefix-caching",
        "--response-replay-trace-path", str(trace),
    ]  # fmt: skip
    return spawn(name, argv, env, log_dir)


def start_dynamo_frontend(
    dyn_python: Path,
    kv_dir: Path,
    log_dir: Path,
    port: int = 0,
    name: str = "dynamo-frontend",
    *,
    harmony_vocab: Path | None = None,
) -> Proc:
    port = port or free_port()
    argv = [
        str(dyn_python), "-m", "dynamo.frontend",
        "--http-host", LOOPBACK, "--http-port", str(port),
        "--discovery-backend", "file", "--request-plane", "tcp",
    ]  # fmt: skip
    proc = spawn(name, argv, dynamo_env(kv_dir, harmony_vocab), log_dir)
    proc.base_url = f"http://{LOOPBACK}:{port}"
    return proc


def serve_argv(python: str, dyn_site: str | None) -> list[str]:
    """The argv prefix of `shakedown`; with `dyn_site`, that site dir is added after ours."""
    if dyn_site is None:
        return [python, "-m", "shakedown"]
    # Dynamo's packages go after ours on sys.path: shakedown's own dependencies win.
    boot = (
        "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
        "sys.argv[0] = 'shakedown'; runpy.run_module('shakedown', run_name='__main__')"
    )
    return [python, "-c", boot, dyn_site]


def start_shakedown(
    model_dir: Path,
    log_dir: Path,
    *,
    name: str,
    model: str = MODEL_NAME,
    trace: Path | None = None,
    engine: str = "mocker",
    tool_call_parser: str | None = "hermes",
    reasoning_parser: str | None = "deepseek_r1",
    extra_env: Mapping[str, str] | None = None,
    dyn_site: str | None = None,
    timeout_s: float = 60.0,
) -> Proc:
    """`shakedown serve` on an ephemeral port; returns once it printed OPENAI_BASE_URL."""
    argv = [
        *serve_argv(sys.executable, dyn_site),
        "serve", "--model-dir", str(model_dir), "--model-name", model,
        "--engine", engine, "--port", "0",
    ]  # fmt: skip
    if reasoning_parser:
        argv += ["--reasoning-parser", reasoning_parser]
    if tool_call_parser:
        argv += ["--tool-call-parser", tool_call_parser]
    if trace is not None:
        argv += ["--replay-trace", str(trace)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYN_WORKER_VALIDATION")}
    env.update(extra_env or {})
    proc = spawn(name, argv, env, log_dir)
    try:
        _wait_for_base_url(proc, timeout_s)
    except BaseException:  # SystemExit too: the caller never gets `proc` to stop it
        proc.stop()
        raise
    return proc


def _wait_for_base_url(proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in proc.log.read_text(errors="replace").splitlines():
            if line.startswith("OPENAI_BASE_URL="):
                url = line.split("=", 1)[1].strip()
                proc.base_url = url[: -len("/v1")] if url.endswith("/v1") else url
                return
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited during start-up:\n{proc.log_tail()}")
        time.sleep(0.1)
    raise RuntimeError(
        f"{proc.name} printed no OPENAI_BASE_URL in {timeout_s:.0f}s:\n{proc.log_tail()}"
    )
