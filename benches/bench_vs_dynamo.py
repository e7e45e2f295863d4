#!/usr/bin/env python3
"""shakedown's loopback against the real Dynamo 1.6.1 frontend: same scripted reply, same
client, one run. Loopback only, bounded by request count and time per scenario.

Servers (all on 127.0.0.1, model dir tests/fixtures/model-deepseek, replay row `text:0`:
"Hello" -> 7 reasoning tokens, 11 content tokens, EOS):
  dynamo           Dynamo frontend -> TCP request plane -> Dynamo mocker (speedup 100)
  shakedown        shakedown serve, its own mocker in-process (no per-token delay)
  shakedown+dynamo shakedown serve -> shakedown.integrations.dynamo -> the same Dynamo mocker

Scenarios: {unary, stream} x {c=1, c=16} x {fresh connection per request, keep-alive}.
Per scenario: requests/s, p50/p99 latency, p50 TTFT (streams: first chunk with content or
reasoning), and CPU ms per request of each server process (utime+stime from /proc/PID/stat
over the scenario; every thread of the process is included).

usage: python benches/bench_vs_dynamo.py [--duration 4] [--requests 2000] [--json OUT.jsonl]
       [--servers dynamo,shakedown,shakedown+dynamo]
Needs a test venv with shakedown installed (./check makes one) and builds/uses the cached
Dynamo venv (tools/dynamo_venv.sh). Writes nothing in the tree unless --json says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "parity"))
import stack  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
REPLAY = "text:0"
CONCURRENCY = (1, 16)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


class Conn:
    """A minimal HTTP/1.1 client: one write per request, TCP_NODELAY, chunked decoding."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, payload: bytes) -> tuple[int, float | None]:
        """Returns (status, monotonic time of the first content chunk or None)."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        self.writer.write(
            (
                f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
            ).encode()
            + payload
        )
        status = int((await self.reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            key, _, value = line.decode().partition(":")
            headers[key.strip().lower()] = value.strip()
        first = None
        if headers.get("transfer-encoding") == "chunked":
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readline()
                    break
                data = await self.reader.readexactly(size + 2)
                if first is None and (b'"content"' in data or b'"reasoning_content"' in data):
                    first = time.perf_counter()
        else:
            await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, first


@dataclass
class Result:
    server: str
    scenario: str
    ok: int
    errors: int
    wall_s: float
    latencies: list[float] = field(repr=False)
    ttfts: list[float] = field(repr=False)
    cpu_ms_per_req: dict[str, float]

    def row(self) -> dict[str, Any]:
        ms = 1e3
        return {
            "server": self.server,
            "scenario": self.scenario,
            "ok": self.ok,
            "errors": self.errors,
            "rps": round(self.ok / self.wall_s, 1) if self.wall_s else None,
            "p50_ms": round(statistics.median(self.latencies) * ms, 3) if self.latencies else None,
            "p99_ms": round(percentile(self.latencies, 99) * ms, 3) if self.latencies else None,
            "ttft_p50_ms": round(statistics.median(self.ttfts) * ms, 3) if self.ttfts else None,
            "cpu_ms_per_req": self.cpu_ms_per_req,
        }


async def load(
    port: int,
    payload: bytes,
    concurrency: int,
    fresh: bool,
    n: int,
    duration: float,
    stream: bool = False,
) -> tuple[list[float], list[float], int, float]:
    latencies: list[float] = []
    ttfts: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal errors, issued
        conn = Conn(stack.LOOPBACK, port)
        while issued < n and time.perf_counter() < deadline:
            issued += 1
            if fresh:
                conn.close()
            t0 = time.perf_counter()
            try:
                status, first = await conn.post("/v1/chat/completions", payload)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                errors += 1
                conn.close()
                continue
            if status != 200:
                errors += 1
                continue
            latencies.append(time.perf_counter() - t0)
            if stream and first is not None:
                ttfts.append(first - t0)
        conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, ttfts, errors, time.perf_counter() - start


def run_scenario(
    server: str,
    port: int,
    pids: dict[str, int],
    stream: bool,
    concurrency: int,
    fresh: bool,
    args: argparse.Namespace,
) -> Result:
    body = {
        "model": stack.MODEL_NAME,
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 64,
        "stream": stream,
        "nvext": {"annotations": [f"output_replay_id:{REPLAY}"]},
    }
    payload = json.dumps(body).encode()
    asyncio.run(load(port, payload, 1, True, args.warmup, 30.0))
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    lat, ttft, errors, wall = asyncio.run(
        load(port, payload, concurrency, fresh, args.requests, args.duration, stream)
    )
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    n = max(1, len(lat))
    cpu = {name: round((after[name] - before[name]) * 1e3 / n, 3) for name in pids}
    scenario = (
        f"{'stream' if stream else 'unary'} c={concurrency} {'fresh' if fresh else 'keep-alive'}"
    )
    return Result(server, scenario, len(lat), errors, wall, lat, ttft, cpu)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| scenario | server | req/s | p50 ms | p99 ms | TTFT p50 ms | CPU ms/req | errors |\n"
        "|---|---|---:|---:|---:|---:|---|---:|"
    )
    lines = [head]
    for r in sorted(rows, key=lambda r: (r["scenario"], r["server"])):
        cpu = ", ".join(f"{k} {v}" for k, v in r["cpu_ms_per_req"].items())
        lines.append(
            f"| {r['scenario']} | {r['server']} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['ttft_p50_ms'] if r['ttft_p50_ms'] is not None else '-'} | {cpu} "
            f"| {r['errors']} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per scenario (cap)")
    ap.add_argument("--requests", type=int, default=2000, help="requests per scenario (cap)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--servers", default="dynamo,shakedown,shakedown+dynamo")
    ap.add_argument("--speedup", type=float, default=100.0, help="Dynamo mocker speedup ratio")
    ap.add_argument("--json", type=Path, help="append one JSON row per scenario here")
    args = ap.parse_args()
    wanted = args.servers.split(",")

    model_dir = ROOT / "tests" / "fixtures" / "model-deepseek"
    if not (model_dir / "tokenizer.json").is_file():
        sys.exit(f"{model_dir} is missing: run `python tests/fixtures/build_model.py` first")
    rows: list[dict[str, Any]] = []
    procs: list[stack.Proc] = []
    with tempfile.TemporaryDirectory(prefix="shakedown-bench-") as tmp:
        work = Path(tmp)
        try:
            dyn_python = stack.dynamo_python()
            trace = stack.build_assets(dyn_python, model_dir, work)
            kv, logs = work / "kv", work / "logs"
            kv.mkdir()
            servers: dict[str, tuple[int, dict[str, int]]] = {}
            if "dynamo" in wanted or "shakedown+dynamo" in wanted:
                mocker = stack.start_dynamo_mocker(
                    dyn_python, model_dir, trace, kv, logs, speedup=args.speedup
                )
                frontend = stack.start_dynamo_frontend(dyn_python, kv, logs)
                procs += [mocker, frontend]
                stack.wait_ready([mocker, frontend], frontend.base_url, stack.MODEL_NAME)
                port = int(frontend.base_url.rsplit(":", 1)[1])
                servers["dynamo"] = (port, {"frontend": frontend.pid, "mocker": mocker.pid})
            if "shakedown" in wanted:
                own = stack.start_shakedown(model_dir, logs, name="shakedown", trace=trace)
                procs.append(own)
                servers["shakedown"] = (int(own.base_url.rsplit(":", 1)[1]), {"loopback": own.pid})
            if "shakedown+dynamo" in wanted:
                env = {**stack.dynamo_env(kv), "SHAKEDOWN_DYNAMO_ENDPOINT": stack.ENDPOINT}
                via = stack.start_shakedown(
                    model_dir, logs, name="shakedown-via-dynamo",
                    engine="shakedown.integrations.dynamo:engine", extra_env=env,
                    dyn_site=stack.site_packages(dyn_python),
                )  # fmt: skip
                procs.append(via)
                servers["shakedown+dynamo"] = (
                    int(via.base_url.rsplit(":", 1)[1]),
                    {"loopback": via.pid, "mocker": servers["dynamo"][1]["mocker"]},
                )
            order: list[Callable[[], Result]] = []
            for stream in (False, True):
                for concurrency in CONCURRENCY:
                    for fresh in (True, False):
                        for name in wanted:
                            port, pids = servers[name]
                            order.append(
                                lambda n=name, p=port, ps=pids, s=stream, c=concurrency, f=fresh: (
                                    run_scenario(n, p, ps, s, c, f, args)
                                )
                            )
            for job in order:
                row = job().row()
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    with open(args.json, "a") as out:
                        out.write(json.dumps(row) + "\n")
        finally:
            for proc in reversed(procs):
                proc.stop()
    print()
    print(markdown(rows))
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
