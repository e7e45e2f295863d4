#!/usr/bin/env python3
"""The hosting floor: `shakedown serve` next to the same host answering without doing any work
(issue 14).

The floor is `shakedown.hosting.ThreadedServer` (the host `shakedown serve` uses) in a process of
its own, serving the bytes `shakedown serve` returned for the same request, captured first: the
unary body as one response, the stream as the same chunks, one send per chunk (each chunk is one
`send_bytes` of the endpoint). It reads the request body, as the endpoint does, and nothing else.
The request is `bench_endpoint`'s (tiny model, mocker at zero delay, replay row `text:0`: 21
tokens and EOS, 22 SSE events).

Both servers get the same client in the same run, keep-alive, c=1 and c=16, rounds interleaved
(floor, then shakedown, per scenario); each figure is the median over rounds, and each ratio to
the floor the median of the rounds' ratios (the floor measured just before the server, so the
load other jobs put on the machine, which drifts between rounds, mostly cancels). The client is wrk
(an independent C load generator, one thread) when it is on PATH, else `bench_endpoint`'s asyncio
client, whose own cost then caps the floor rows (say so when quoting them). Server CPU per request
is the server process's utime+stime over the scenario; its context switches per request are all
its threads' (voluntary and involuntary, from /proc): the thread handoffs a request costs.

With --profile it runs wrk against `shakedown serve` alone while py-spy samples it, and splits
the server's CPU per request into stages: the granian threads (Rust: sockets, HTTP, RSGI) from
/proc per-thread CPU, and the Python loop thread's samples by the shakedown source line they sit
in (routing, Pipeline.chat, the engine, Exchange.feed, sends...). It needs py-spy (`pip install
py-spy`) and the right to ptrace the server (root, or ptrace_scope 0).

With --before DIR it also runs a second `shakedown serve` importing shakedown from DIR (another
checkout's `python/` folder with its built `_core`), as the row `before`, in the same rounds.

Loopback only; each scenario is bounded by time (wrk) or by a request count and time (asyncio).

With --nice N (negative: root) the bench, and so every server and client it starts, runs at
that niceness: on a machine shared with other jobs, a lower value keeps their load from
swinging the rounds as much.

usage: python benches/bench_floor.py [--seconds 3] [--rounds 3] [--client wrk|asyncio]
                                     [--before DIR] [--nice N]
       python benches/bench_floor.py --profile [--seconds 6] [--nice N]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import linecache
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_endpoint import (
    Conn,
    _proc_cpu,
    chat_body,
    http_request,
    run_scenario,
    start_server,
)

HERE = Path(__file__).resolve()
SCENARIOS = [(stream, c) for stream in (False, True) for c in (1, 16)]
PATH = "/v1/chat/completions"


# --- capture ---------------------------------------------------------------------------------


async def capture(port: int, stream: bool) -> list[bytes]:
    """The body `shakedown serve` answers `chat_body(stream)` with: one item when it has a
    content-length, else its chunks as sent."""
    conn = await Conn.open(port)
    try:
        conn.writer.write(http_request(chat_body(stream)))
        head = (await conn.reader.readuntil(b"\r\n\r\n")).lower()
        if b"transfer-encoding: chunked" not in head:
            length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
            return [await conn.reader.readexactly(length)]
        chunks = []
        while True:
            size = int((await conn.reader.readuntil(b"\r\n")).strip(), 16)
            data = await conn.reader.readexactly(size + 2)
            if size == 0:
                return chunks
            chunks.append(data[:-2])
    finally:
        conn.close()


# --- the floor server (runs in its own process) ----------------------------------------------


class FloorApp:
    """Reads the request body, then answers with the captured bytes: nothing else."""

    def __init__(self, unary: bytes, chunks: list[bytes]) -> None:
        self.unary, self.chunks = unary, chunks

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        from shakedown.endpoint.app import JSON_HEADERS, SSE_HEADERS

        body = await proto()
        if b'"stream":true' not in body:
            proto.response_bytes(200, JSON_HEADERS, self.unary)
            return
        transport = proto.response_stream(200, SSE_HEADERS)
        for chunk in self.chunks:
            await transport.send_bytes(chunk)


def serve_floor(captured: str) -> int:
    from shakedown.hosting import ThreadedServer

    data = json.loads(Path(captured).read_text())
    app = FloorApp(data["unary"].encode(), [c.encode() for c in data["stream"]])
    server = ThreadedServer(app, host="127.0.0.1", port=0, what="floor")
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the bench closes our stdin
    server.stop()
    return 0


def start_floor(captured: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE), "--serve-floor", str(captured)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


# --- clients ---------------------------------------------------------------------------------

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = [==[%s]==]
wrk.headers["content-type"] = "application/json"
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKJSON {\\"requests\\":%%d,\\"duration_us\\":%%d,\\"errors\\":%%d,\\"p50_us\\":%%d,\\"p99_us\\":%%d}\\n",
    summary.requests, summary.duration, e.status + e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_scripts(workdir: Path) -> dict[bool, Path]:
    scripts = {}
    for stream in (False, True):
        path = workdir / f"{'stream' if stream else 'unary'}.lua"
        path.write_text(WRK_SCRIPT % chat_body(stream).decode())
        scripts[stream] = path
    return scripts


def run_wrk(port: int, script: Path, concurrency: int, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [
            *("wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "5s"),
            *("-s", str(script), f"http://127.0.0.1:{port}{PATH}"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 30,
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("WRKJSON "))
    raw = json.loads(line[len("WRKJSON ") :])
    return {
        "requests": raw["requests"],
        "errors": raw["errors"],
        "rps": raw["requests"] / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
    }


def run_asyncio(port: int, stream: bool, concurrency: int, seconds: float) -> dict[str, float]:
    r = asyncio.run(run_scenario(port, stream, True, concurrency, 10**6, seconds))
    return {
        "requests": r.requests,
        "errors": 0,
        "rps": r.rps,
        "p50_ms": r.p50_ms,
        "p99_ms": r.p99_ms,
    }


# --- memory per open stream ------------------------------------------------------------------

OPEN_STREAMS = 256
STREAM_DELAY_S = 0.5
"""The mocker's delay per token while streams are held open: the first event comes after it."""


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


async def hold_streams(port: int, count: int) -> list[Conn]:
    """`count` streams open, each past its first event."""
    conns = [await Conn.open(port) for _ in range(count)]

    async def first_event(conn: Conn) -> None:
        conn.writer.write(http_request(chat_body(True)))
        await asyncio.wait_for(conn.reader.readuntil(b"\n\n"), 30)

    await asyncio.gather(*(first_event(conn) for conn in conns))
    return conns


def memory_per_stream(env: dict[str, str] | None, count: int) -> float:
    """KiB of resident memory per open stream: `count` streams held against a `shakedown serve`
    whose mocker waits `STREAM_DELAY_S` per token, after a few held and closed to warm it up."""
    proc, port = start_server(env, ["--token-delay", str(STREAM_DELAY_S)])

    async def measure() -> float:
        for conn in await hold_streams(port, 16):
            conn.close()
        await asyncio.sleep(0.5)  # the engine notices and the handlers end
        before = rss_kib(proc.pid)
        conns = await hold_streams(port, count)
        await asyncio.sleep(0.2)  # every disconnect watcher has started
        after = rss_kib(proc.pid)
        for conn in conns:
            conn.close()
        return (after - before) / count

    try:
        return asyncio.run(measure())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)


# --- the comparison --------------------------------------------------------------------------


def context_switches(pid: int) -> int:
    """Context switches (voluntary and not) of all the process's threads so far: each thread
    handoff of a request (a wake-up, a wait for the GIL, a preemption by the thread it woke)
    is one or two."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            continue  # the thread ended
    return total


def measure(
    client: str, scripts: dict[bool, Path], pid: int, port: int, stream: bool, c: int, secs: float
) -> dict[str, float]:
    warm = 1
    if client == "wrk":
        run_wrk(port, scripts[stream], c, warm)
    else:
        run_asyncio(port, stream, c, warm)
    cpu, switches = _proc_cpu(pid), context_switches(pid)
    row = (
        run_wrk(port, scripts[stream], c, secs)
        if client == "wrk"
        else run_asyncio(port, stream, c, secs)
    )
    row["cpu_us_per_req"] = 1e6 * (_proc_cpu(pid) - cpu) / max(row["requests"], 1)
    row["switches_per_req"] = (context_switches(pid) - switches) / max(row["requests"], 1)
    return row


def before_env(python_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [python_dir, env.get("PYTHONPATH")]))
    return env


def compare(
    client: str, seconds: float, rounds: int, workdir: Path, before_dir: str | None
) -> dict[str, Any]:
    shakedown, sd_port = start_server()
    servers = [("shakedown", shakedown, sd_port)]
    if before_dir is not None:
        servers.insert(0, ("before", *start_server(before_env(before_dir))))
    try:
        unary = asyncio.run(capture(sd_port, False))[0]
        chunks = asyncio.run(capture(sd_port, True))
        captured = workdir / "captured.json"
        captured.write_text(
            json.dumps({"unary": unary.decode(), "stream": [c.decode() for c in chunks]})
        )
        floor, floor_port = start_floor(captured)
        scripts = wrk_scripts(workdir)
        runs: dict[tuple[str, bool, int], list[dict[str, float]]] = collections.defaultdict(list)
        try:
            for _ in range(rounds):
                for stream, c in SCENARIOS:
                    for name, proc, port in [("floor", floor, floor_port), *servers]:
                        row = measure(client, scripts, proc.pid, port, stream, c, seconds)
                        runs[(name, stream, c)].append(row)
        finally:
            assert floor.stdin is not None
            floor.stdin.close()
            floor.wait(timeout=10)
    finally:
        for _, proc, _ in servers:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)
    rows = []
    for (name, stream, c), measured in runs.items():
        row: dict[str, Any] = {"server": name, "stream": stream, "c": c}
        for key in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "switches_per_req"):
            row[key] = statistics.median(m[key] for m in measured)
        # Each round measures the floor just before the server: the ratio within a round
        # cancels the load other jobs put on the machine, which drifts between rounds.
        floor_rounds = runs[("floor", stream, c)]
        row["rps_vs_floor"] = statistics.median(
            m["rps"] / f["rps"] for m, f in zip(measured, floor_rounds, strict=True)
        )
        row["p50_vs_floor"] = statistics.median(
            m["p50_ms"] / f["p50_ms"] for m, f in zip(measured, floor_rounds, strict=True)
        )
        row["rounds"] = measured
        row["requests"] = sum(m["requests"] for m in measured)
        row["errors"] = sum(m["errors"] for m in measured)
        rows.append(row)
    events = sum(chunk.count(b"data: ") for chunk in chunks)
    memory = {"shakedown": memory_per_stream(None, OPEN_STREAMS)}
    if before_dir is not None:
        memory["before"] = memory_per_stream(before_env(before_dir), OPEN_STREAMS)
    return {
        "memory_kib_per_stream": memory,
        "client": client,
        "servers": ["floor", *(name for name, _, _ in servers)],
        "rows": rows,
        "unary_bytes": len(unary),
        "stream_chunks": len(chunks),
        "stream_events": events,
    }


def print_compare(result: dict[str, Any], seconds: float, rounds: int) -> None:
    print(
        f"client: {result['client']}; keep-alive; {rounds} rounds x {seconds:g} s per scenario "
        f"(medians); unary body {result['unary_bytes']} B; stream {result['stream_chunks']} "
        f"sends, {result['stream_events']} SSE events"
    )
    print(
        "| reply | c | server | req/s | p50 ms | p99 ms | server CPU us/req "
        "| server context switches/req | errors |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    by = {(r["server"], r["stream"], r["c"]): r for r in result["rows"]}
    for stream, c in SCENARIOS:
        for name in result["servers"]:
            r = by[(name, stream, c)]
            print(
                f"| {'stream' if stream else 'unary'} | {c} | {name} | {r['rps']:.0f} "
                f"| {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['cpu_us_per_req']:.0f} "
                f"| {r['switches_per_req']:.2f} | {r['errors']} |"
            )
    print()
    for name, kib in result["memory_kib_per_stream"].items():
        print(f"{name}: {kib:.1f} KiB resident per open stream ({OPEN_STREAMS} held)")
    for name in result["servers"][1:]:
        for stream in (False, True):
            kind = "stream" if stream else "unary"
            f16, s16 = by[("floor", stream, 16)], by[(name, stream, 16)]
            f1, s1 = by[("floor", stream, 1)], by[(name, stream, 1)]
            print(
                f"{name} {kind}: c=16 req/s {name}/floor {s16['rps_vs_floor']:.2f}; "
                f"c=1 p50 {name}/floor {s1['p50_vs_floor']:.2f} (medians of the rounds' "
                f"ratios); CPU/req over the "
                f"floor's: c=16 +{s16['cpu_us_per_req'] - f16['cpu_us_per_req']:.0f} us, "
                f"c=1 +{s1['cpu_us_per_req'] - f1['cpu_us_per_req']:.0f} us"
            )


# --- the profile -----------------------------------------------------------------------------

SHAKEDOWN_SRC = str(HERE.parent.parent / "python" / "shakedown")
# (stage, source-line pattern), first match wins, checked on the innermost shakedown frame.
LINE_STAGES = [
    ("Exchange.feed/finish (Rust, per frame)", re.compile(r"exchange\.(feed|finish)\(")),
    ("Pipeline.chat (parse + template + tokenize)", re.compile(r"pipeline\.(chat|completions)\(")),
    ("engine request bytes -> dict (orjson.loads)", re.compile(r"orjson\.loads\(exchange")),
    ("engine item -> JSON (as_frame)", re.compile(r"as_frame\(")),
    ("response send (granian)", re.compile(r"send_bytes|response_bytes|response_stream")),
    ("app.py disconnect watcher (a task per request)", re.compile(r"client_disconnect|watcher\.")),
    ("app.py body read (await proto())", re.compile(r"await proto\(\)")),
    ("app.py request id (uuid4)", re.compile(r"uuid")),
]
FILE_STAGES = [
    ("engine (the mocker)", "engines/mocker.py"),
    ("engine stream glue (frames.py)", "endpoint/frames.py"),
    ("app.py other: routing, auth, headers, timeout, glue", "endpoint/app.py"),
    ("hosting.py busy tracker", "hosting.py"),
    ("request context", "endpoint/context.py"),
]
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def stage_of(stack: list[str]) -> str:
    for frame in reversed(stack):  # innermost first
        m = FRAME.match(frame)
        if m is None or "/shakedown/" not in m["file"]:
            continue
        text = linecache.getline(m["file"], int(m["line"]))
        if "run_until_complete" in text:
            return "event loop: uvloop, task steps, granian future callbacks"
        for stage, pattern in LINE_STAGES:
            if pattern.search(text):
                return stage
        for stage, suffix in FILE_STAGES:
            if m["file"].endswith(suffix):
                return stage
        return f"other shakedown ({Path(m['file']).name})"
    return "no shakedown frame"


def innermost_line(stack: list[str]) -> str:
    """The innermost shakedown frame's source line (for the JSON detail)."""
    for frame in reversed(stack):
        m = FRAME.match(frame)
        if m is not None and "/shakedown/" in m["file"]:
            text = linecache.getline(m["file"], int(m["line"])).strip()
            return f"{Path(m['file']).name}:{m['line']} {text}"
    return "-"


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per thread id (the threads all share the process's name)."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


THREAD = re.compile(r"^thread \((?P<tid>\d+)\)(: (?P<name>.*))?$")


def profile(seconds: float, rate: int, workdir: Path) -> dict[str, Any]:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    scripts = wrk_scripts(workdir)
    proc, port = start_server()
    results: dict[str, Any] = {}
    try:
        for stream in (False, True):
            kind = "stream" if stream else "unary"
            run_wrk(port, scripts[stream], 16, 1)  # warm-up
            raw = workdir / f"{kind}.txt"
            spy = subprocess.Popen(
                [
                    *(
                        pyspy,
                        "record",
                        "--nonblocking",
                        "--threads",
                        "--full-filenames",
                        "-r",
                        str(rate),
                        "-f",
                        "raw",
                    ),
                    *("-o", str(raw), "-d", str(int(seconds) + 1), "-p", str(proc.pid)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)  # py-spy attaches
            before = thread_cpu(proc.pid)
            row = run_wrk(port, scripts[stream], 16, seconds)
            after = thread_cpu(proc.pid)
            spy.wait(timeout=seconds + 30)
            requests = row["requests"]
            # Per thread: its stages' samples (py-spy), then its measured CPU shared out by them.
            samples: dict[int, collections.Counter[str]] = collections.defaultdict(
                collections.Counter
            )
            names: dict[int, str] = {}
            lines: collections.Counter[str] = collections.Counter()
            for line in raw.read_text().splitlines():
                stack, _, count = line.rpartition(" ")
                frames = stack.split(";")
                m = THREAD.match(frames[0])
                if m is None:
                    continue
                tid = int(m["tid"])
                names[tid] = m["name"] or "granian thread holding the GIL (RSGI calls)"
                if len(frames) == 1:
                    stage = "no Python frame (granian's Rust calling Python)"
                else:
                    stage = stage_of(frames[1:])
                samples[tid][stage] += int(count)
                lines[innermost_line(frames[1:])] += int(count)
            rows = []
            for tid, cpu in after.items():
                us = 1e6 * (cpu - before.get(tid, 0.0)) / requests
                if us < 0.05:
                    continue
                name = names.get(tid, "granian/tokio thread, Rust only (no Python seen)")
                total = sum(samples[tid].values())
                stages = {k: us * v / total for k, v in samples[tid].most_common()} if total else {}
                rows.append({"tid": tid, "thread": name, "us": us, "stages": stages})
            rows.sort(key=lambda r: -r["us"])
            top = dict(lines.most_common(25))
            results[kind] = {"requests": requests, "rps": row["rps"], "threads": rows, "lines": top}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    return results


def print_profile(results: dict[str, Any]) -> None:
    for kind in ("unary", "stream"):
        r = results[kind]
        print(f"\n{kind}, c=16 keep-alive, wrk: {r['rps']:.0f} req/s")
        print("| where | CPU us/request |")
        print("|---|---:|")
        for t in r["threads"]:
            print(f"| thread {t['tid']}: {t['thread']} | {t['us']:.1f} |")
            for stage, us in t["stages"].items():
                print(f"| - {stage} | {us:.1f} |")
        print(f"| total | {sum(t['us'] for t in r['threads']):.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", choices=("wrk", "asyncio"))
    parser.add_argument("--profile", action="store_true", help="stage breakdown with py-spy")
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples/s (--profile)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--before", help="a python/ dir to serve as the row `before`")
    parser.add_argument("--nice", type=int, help="run at this niceness (children inherit it)")
    parser.add_argument("--serve-floor", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        return serve_floor(args.serve_floor)
    if args.nice is not None:
        os.nice(args.nice - os.nice(0))
    client = args.client or ("wrk" if shutil.which("wrk") else "asyncio")
    if (client == "wrk" or args.profile) and not shutil.which("wrk"):
        sys.exit("wrk is not on PATH (apt-get install wrk), or use --client asyncio")
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        if args.profile:
            result = profile(args.seconds, args.rate, Path(tmp))
            print_profile(result)
        else:
            result = compare(client, args.seconds, args.rounds, Path(tmp), args.before)
            print_compare(result, args.seconds, args.rounds)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
