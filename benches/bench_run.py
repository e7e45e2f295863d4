#!/usr/bin/env python3
"""`shakedown run` on plain Dynamo 1.6.1 Python workers, with the real Dynamo frontend
watching discovery (file backend, TCP request plane, all on 127.0.0.1).

- release: `DYN_WORKER_VALIDATION_GATES='exec:shakedown check' shakedown run -- python
  tests/parity/tiny_worker.py NAME` (the tiny model, shakedown's scripted mocker served over
  the request plane); the time from the worker's `register_model` call to the end of the
  real registration, as the hold logs it, and from the process start until the frontend
  lists the model. `--runs` times.
- memory: VmRSS / VmHWM of tests/parity/dynamo_worker.py (imports nothing of shakedown)
  run plainly, and under `shakedown run` while held (its gate waiting) and once released.

usage: python benches/bench_run.py [--runs 5]
Needs a test venv with shakedown installed (./check makes one) and builds/uses the cached
Dynamo venv (tools/dynamo_venv.sh). Writes nothing in the tree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests" / "parity"
sys.path.insert(0, str(PARITY))
import stack  # noqa: E402

RELEASED = re.compile(r"released (\d+\.\d+)s after the registration call")
MODEL_DIR = ROOT / "tests" / "fixtures" / "model-deepseek"


def wait(predicate: Callable[[], object], proc: stack.Proc, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} did not get there:\n{proc.log_tail()}")
        time.sleep(0.02)


def listed(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=5) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


def memory_kib(pid: int) -> tuple[int, int]:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()[0] if value.split() else ""
    return int(fields["VmRSS"]), int(fields["VmHWM"])


def run_argv(dyn_site: str, worker: list[str]) -> list[str]:
    return [*stack.serve_argv(sys.executable, dyn_site), "run", "--", "python", *worker]


def plain_argv(dyn_site: str, worker: list[str]) -> list[str]:
    # Same interpreter and the same packages on the path, without shakedown run.
    boot = (
        "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return [sys.executable, "-c", boot, dyn_site, *worker]


def release_times(dyn_site: str, env: Mapping[str, str], base: str, work: Path, runs: int) -> None:
    env = {
        **env,
        "DYN_WORKER_VALIDATION_GATES": "exec:shakedown check",
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
    }
    held, listed_after = [], []
    for i in range(runs):
        name = f"bench-release-{i}"
        t0 = time.monotonic()
        proc = stack.spawn(name, run_argv(dyn_site, [str(PARITY / "tiny_worker.py"), name]),
                           env, work)  # fmt: skip
        try:
            wait(lambda name=name: name in listed(base), proc)
            listed_after.append(time.monotonic() - t0)
            match = RELEASED.search(proc.log.read_text())
            assert match, proc.log_tail()
            held.append(float(match.group(1)))
        finally:
            proc.stop()
    print(f"registration call -> released (default gate), {runs} runs: median "
          f"{statistics.median(held):.3f} s, min {min(held):.3f}, max {max(held):.3f}")  # fmt: skip
    print(
        f"process start -> listed by the frontend: median {statistics.median(listed_after):.2f} s"
    )


def memory(dyn_site: str, env: Mapping[str, str], base: str, work: Path) -> None:
    worker = [str(PARITY / "dynamo_worker.py"), str(MODEL_DIR)]
    plain = stack.spawn("bench-plain", plain_argv(dyn_site, [*worker, "bench-plain"]), env, work)
    try:
        wait(lambda: "bench-plain" in listed(base), plain)
        time.sleep(1.0)  # let start-up allocations settle before reading
        plain_rss, plain_hwm = memory_kib(plain.pid)
    finally:
        plain.stop()
    record, go = work / "gate.json", work / "go"
    gate = [sys.executable, str(PARITY / "run_gate.py"), str(record), "--go", str(go)]
    held_env = {**env, "DYN_WORKER_VALIDATION_GATES": json.dumps([{"name": "g", "exec": gate}])}
    proc = stack.spawn("bench-held", run_argv(dyn_site, [*worker, "bench-held"]), held_env, work)
    try:
        wait(record.is_file, proc)
        time.sleep(1.0)
        held_rss, _ = memory_kib(proc.pid)
        go.touch()
        wait(lambda: "bench-held" in listed(base), proc)
        time.sleep(1.0)
        released_rss, held_hwm = memory_kib(proc.pid)
    finally:
        proc.stop()
    mib = 1024.0
    print(f"plain worker:           RSS {plain_rss / mib:6.1f} MiB (peak {plain_hwm / mib:.1f})")
    print(f"under shakedown run:    RSS {held_rss / mib:6.1f} MiB while held "
          f"(+{(held_rss - plain_rss) / mib:.1f}), {released_rss / mib:.1f} MiB released "
          f"(+{(released_rss - plain_rss) / mib:.1f}), peak {held_hwm / mib:.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    dyn_python = stack.dynamo_python()
    dyn_site = stack.site_packages(dyn_python)
    with tempfile.TemporaryDirectory(prefix="shakedown-bench-run-") as tmp:
        work = Path(tmp)
        kv = work / "kv"
        kv.mkdir()
        frontend = stack.start_dynamo_frontend(dyn_python, kv, work)
        env = {k: v for k, v in stack.dynamo_env(kv).items() if not k.startswith("DYN_WORKER_")}
        try:
            wait(lambda: _up(frontend.base_url), frontend)
            release_times(dyn_site, env, frontend.base_url, work, args.runs)
            memory(dyn_site, env, frontend.base_url, work)
        finally:
            frontend.stop()


def _up(base_url: str) -> bool:
    try:
        listed(base_url)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
