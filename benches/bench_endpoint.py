#!/usr/bin/env python3
"""Bounded loopback benchmark of the endpoint (issue 4 §9).

The server is `shakedown serve` (packaged tiny model, mocker at zero delay) in its
own process; the client here is a minimal asyncio HTTP/1.1 client (one write per
request, TCP_NODELAY) so the figures are the server's, not an SDK's. Every scenario
is bounded by a request count and a time cap; traffic goes to 127.0.0.1 only.

Reports, per scenario (unary/stream x keep-alive/fresh x c=1/c=16): requests/s,
p50/p99 latency, p50 time to first streamed byte, streamed events/s; then the cost
per request of iterating the same engine directly (engine alone, and engine plus
the pipeline's exchange), the resident memory attaching the endpoint adds (pipeline
and tokenizer loaded), and the CPU the attached endpoint uses while idle.

With --slowloris it measures instead how long a probe takes while N connections sit idle
(connected, nothing sent): an authenticated chat request and /live on the endpoint, /live on
the standalone health server, each against a fresh set of idle connections, capped at 40 s.

usage: python benches/bench_endpoint.py [--requests 2000] [--seconds 5] [--json OUT]
       python benches/bench_endpoint.py --slowloris [--idle 128,500] [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURN = {"annotations": ["output_replay_id:text:0"]}


def chat_body(stream: bool) -> bytes:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 64,
        "stream": stream,
        "nvext": TURN,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def http_request(body: bytes) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


class Conn:
    """One HTTP/1.1 connection that reads content-length and chunked responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, request: bytes) -> tuple[float | None, int]:
        """Send, read the whole response; returns (seconds to first body byte, SSE events)."""
        start = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        headers = head.lower()
        if b"transfer-encoding: chunked" not in headers:
            length = int(headers.split(b"content-length: ")[1].split(b"\r\n")[0])
            await self.reader.readexactly(length)
            return None, 0
        first: float | None = None
        events = 0
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return first, events
            if first is None:
                first = time.perf_counter() - start
            events += data.count(b"data: ")


@dataclass
class Result:
    scenario: str
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float | None
    events_per_s: float | None


async def run_scenario(
    port: int, stream: bool, keep_alive: bool, concurrency: int, count: int, seconds: float
) -> Result:
    request = http_request(chat_body(stream))
    latencies: list[float] = []
    firsts: list[float] = []
    events = 0
    deadline = time.perf_counter() + seconds
    remaining = count

    async def worker() -> None:
        nonlocal remaining, events
        conn = await Conn.open(port) if keep_alive else None
        try:
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                start = time.perf_counter()
                c = conn or await Conn.open(port)
                first, n = await c.exchange(request)
                if conn is None:
                    c.close()
                latencies.append(time.perf_counter() - start)
                events += n
                if first is not None:
                    firsts.append(first)
        finally:
            if conn is not None:
                conn.close()

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    name = f"{'stream' if stream else 'unary'}, {'keep-alive' if keep_alive else 'fresh'}, c={concurrency}"
    return Result(
        scenario=name,
        requests=len(latencies),
        rps=len(latencies) / elapsed,
        p50_ms=1000 * statistics.median(latencies),
        p99_ms=1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        ttfb_p50_ms=1000 * statistics.median(firsts) if firsts else None,
        events_per_s=events / elapsed if stream else None,
    )


def start_server(
    env: dict[str, str] | None = None, args: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shakedown", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("OPENAI_BASE_URL="):
        proc.kill()
        raise RuntimeError(f"shakedown serve printed {line!r}")
    return proc, int(line.rsplit(":", 1)[1].split("/")[0])


def direct_cost(count: int) -> dict[str, float]:
    """Microseconds per request iterating the mocker alone, and with the pipeline's exchange."""
    import orjson

    from shakedown.cli import TINY_MODEL, make_mocker
    from shakedown.endpoint import ModelCard, RequestContext, build_pipeline

    card = ModelCard(
        str(TINY_MODEL),
        served_name="tiny",
        reasoning_parser="deepseek_r1",
        tool_call_parser="hermes",
    )
    pipeline = build_pipeline(card)
    mocker = make_mocker(pipeline, TINY_MODEL)
    body = chat_body(True)

    async def engine_only() -> None:
        request = orjson.loads(pipeline.chat(body, "r").engine_request)
        start = time.perf_counter()
        for _ in range(count):
            async for _frame in mocker.generate(request, RequestContext("r")):
                pass
        results["engine_us"] = 1e6 * (time.perf_counter() - start) / count

    async def with_pipeline() -> None:
        start = time.perf_counter()
        for _ in range(count):
            exchange = pipeline.chat(body, "r")
            request = orjson.loads(exchange.engine_request)
            async for frame in mocker.generate(request, RequestContext("r")):
                exchange.feed(orjson.dumps(frame))
            exchange.finish()
        results["engine_and_pipeline_us"] = 1e6 * (time.perf_counter() - start) / count

    results: dict[str, float] = {}
    asyncio.run(engine_only())
    asyncio.run(with_pipeline())
    return results


ATTACH_PROBE = """
import os, time, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import shakedown.endpoint, shakedown.engines.mocker, granian, uvloop, orjson  # imports are not attach
from shakedown.cli import TINY_MODEL
from shakedown.endpoint import EngineRegistry, ModelCard, attach
before = rss()
endpoint = attach(ModelCard(str(TINY_MODEL), served_name="tiny"), EngineRegistry())
after = rss()
time.sleep(0.5)
t0, c0 = time.perf_counter(), time.process_time()
time.sleep(float(sys.argv[1]))
cpu = time.process_time() - c0
wall = time.perf_counter() - t0
endpoint.stop()
print(after - before, cpu, wall)
"""


def attach_cost(idle_seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", ATTACH_PROBE, str(idle_seconds)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    rss, cpu, wall = int(out[0]), float(out[1]), float(out[2])
    return {"rss_added_mib": rss / 2**20, "idle_cpu_ms_per_s": 1000 * cpu / wall}


SLOWLORIS_SERVER = """
import sys
import shakedown.hosting
if len(sys.argv) > 1:
    shakedown.hosting.MAX_CONNECTIONS = int(sys.argv[1])
from shakedown.cli import TINY_MODEL, make_mocker
from shakedown.endpoint import EngineRegistry, ModelCard, attach
from shakedown.validation import HealthServer, WorkerValidation
card = ModelCard(str(TINY_MODEL), served_name="tiny")
registry = EngineRegistry()
endpoint = attach(card, registry, api_key="bench")
registry.register(card.endpoint, make_mocker(endpoint.pipeline, TINY_MODEL).generate)
health = HealthServer(WorkerValidation.from_env({}))
health.start()
print(endpoint.port, health.port, flush=True)
sys.stdin.read()
"""
PROBE_CAP_S = 40.0


def timed_probe(port: int, request: bytes) -> float | None:
    """Seconds until the response's first bytes arrive on a fresh connection, None past the cap."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_CAP_S) as conn:
            conn.sendall(request)
            if not conn.recv(65536).startswith(b"HTTP/1.1 200"):
                raise RuntimeError("the probe was not answered 200")
    except TimeoutError:
        return None
    return time.perf_counter() - start


def hold_idle(port: int, count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        held.append(sock)
    return held


def slowloris(idle_counts: list[int], limit: int | None) -> list[dict[str, float | int | None]]:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    argv = [sys.executable, "-c", SLOWLORIS_SERVER, *([str(limit)] if limit else [])]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    port, health_port = map(int, proc.stdout.readline().split())
    body = chat_body(False)
    auth = b"authorization: Bearer bench\r\n"
    chat = http_request(body).replace(b"host: 127.0.0.1\r\n", b"host: 127.0.0.1\r\n" + auth)
    live = b"GET /live HTTP/1.1\r\nhost: 127.0.0.1\r\n" + auth + b"\r\n"
    probes = [("chat_s", port, chat), ("live_s", port, live), ("health_live_s", health_port, live)]
    rows: list[dict[str, float | int | None]] = []
    try:
        for count in idle_counts:
            row: dict[str, float | int | None] = {"idle": count}
            for name, target, request in probes:
                held = hold_idle(target, count)
                try:
                    row[name] = timed_probe(target, request)
                finally:
                    for sock in held:
                        sock.close()
            rows.append(row)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    return rows


def print_slowloris(rows: list[dict[str, float | int | None]], limit: int | None) -> None:
    def shown(value: float | int | None) -> str:
        return f"> {PROBE_CAP_S:.0f} s" if value is None else f"{1000 * float(value):.1f} ms"

    print(f"connection limit: {limit or 'default'}")
    print("| idle connections | authenticated chat | /live | health server /live |")
    print("|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['idle']} | {shown(row['chat_s'])} | {shown(row['live_s'])} "
            f"| {shown(row['health_live_s'])} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="cap per scenario")
    parser.add_argument("--seconds", type=float, default=5.0, help="time cap per scenario")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--slowloris", action="store_true", help="measure under idle connections")
    parser.add_argument("--idle", default="128,500", help="idle connection counts (--slowloris)")
    parser.add_argument("--limit", type=int, help="the servers' connection limit (--slowloris)")
    args = parser.parse_args()
    if args.slowloris:
        rows = slowloris([int(n) for n in args.idle.split(",")], args.limit)
        print_slowloris(rows, args.limit)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2))
        return 0
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    proc, port = start_server()
    server_cpu_start = _proc_cpu(proc.pid)
    try:
        results = []
        warmed = 0
        for stream in (False, True):
            for keep_alive in (True, False):
                for concurrency in (1, 16):
                    asyncio.run(
                        run_scenario(port, stream, keep_alive, concurrency, 50, 2.0)
                    )  # warm-up
                    results.append(
                        asyncio.run(
                            run_scenario(
                                port, stream, keep_alive, concurrency, args.requests, args.seconds
                            )
                        )
                    )
        server_cpu = _proc_cpu(proc.pid) - server_cpu_start
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)

    direct = direct_cost(min(args.requests, 2000))
    attach = attach_cost(args.idle_seconds)
    total = warmed + sum(r.requests for r in results)

    print("| scenario | requests | req/s | p50 ms | p99 ms | TTFB p50 ms | SSE events/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        ttfb = f"{r.ttfb_p50_ms:.2f}" if r.ttfb_p50_ms is not None else "-"
        eps = f"{r.events_per_s:.0f}" if r.events_per_s is not None else "-"
        print(
            f"| {r.scenario} | {r.requests} | {r.rps:.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {ttfb} | {eps} |"
        )
    print()
    print(
        f"server CPU per request (all scenarios, incl. warm-up): {1000 * server_cpu / max(total, 1):.3f} ms"
    )
    print(f"engine iterated directly: {direct['engine_us']:.1f} us/request")
    print(f"engine + pipeline exchange directly: {direct['engine_and_pipeline_us']:.1f} us/request")
    print(
        f"RSS added by attaching (pipeline + tokenizer + server): {attach['rss_added_mib']:.1f} MiB"
    )
    print(f"CPU while idle: {attach['idle_cpu_ms_per_s']:.3f} ms per second")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"scenarios": [asdict(r) for r in results], "direct": direct, "attach": attach},
                indent=2,
            )
        )
    return 0


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


if __name__ == "__main__":
    sys.exit(main())
