#!/usr/bin/env python3
"""What the check runner costs: a suite's overhead per request, and the default suite's time.

The endpoint is `shakedown serve` (packaged tiny model, mocker at zero delay) in its own
process. Per request, three ways to send the same streamed chat request N times, one at a
time on fresh connections:
- bare: http.client, the response read whole and nothing else done with it;
- client: the check runner's client (SSE events parsed, framing problems noted);
- suite: a `warmup` check of N requests at concurrency 1 (the runner, the thread pool and
  the whole-stream judgement: one id, one finish_reason, [DONE], ...).
The overhead is suite minus bare, per request. Then the default suite (nine checks, tools and
reasoning expected) end to end, as `shakedown check` runs it as a gate.

usage: python benches/bench_checks.py [--requests 500] [--suites 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench_endpoint import start_server
from shakedown.checks import Settings, run_checks, run_suite
from shakedown.checks.client import Client
from shakedown.checks.suite import suite_from_table

BODY = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Request 0. Summarise: sea wave tide shore"}],
    "max_tokens": 16,
    "temperature": 0,
    "seed": 1234,
    "stream": True,
}


def per_request(run: object, n: int) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return (time.perf_counter() - start) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--suites", type=int, default=20)
    args = parser.parse_args()
    n = args.requests
    proc, port = start_server()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        parts = urlsplit(url)
        body = json.dumps(BODY).encode()

        def bare() -> None:
            for _ in range(n):
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
                conn.request("POST", parts.path + "/chat/completions", body,
                             {"Content-Type": "application/json"})  # fmt: skip
                conn.getresponse().read()
                conn.close()

        client = Client(url, None, 30)

        def with_client() -> None:
            for _ in range(n):
                client.stream("/chat/completions", BODY)

        warmup = {"kind": "warmup", "requests": n, "concurrency": 1, "prompt_tokens": [4],
                  "max_tokens": 16}  # fmt: skip
        suite = suite_from_table({"check": [warmup]}, "bench", Path.cwd())
        settings = Settings(url, None, "tiny")

        def with_suite() -> None:
            [result] = run_suite(suite, settings)
            assert result.outcome == "passed", result.reason

        bare(), with_client(), with_suite()  # warm the server and the imports
        # Interleaved rounds, so load from elsewhere on the machine hits all three alike.
        rounds: dict[str, list[float]] = {"bare": [], "client": [], "suite": []}
        for _ in range(5):
            for name, fn in (("bare", bare), ("client", with_client), ("suite", with_suite)):
                rounds[name].append(per_request(fn, n))
        figures = {name: statistics.median(values) for name, values in rounds.items()}
        for name, ms in figures.items():
            print(f"{name:<7} {ms:.3f} ms/request")
        print(f"suite overhead over bare: {figures['suite'] - figures['bare']:.3f} ms/request "
              f"({figures['suite'] / figures['bare']:.2f}x)")  # fmt: skip

        full = Settings(url, None, "tiny", expect_reasoning=True, expect_tools=True)
        times = []
        for _ in range(args.suites):
            start = time.perf_counter()
            results = run_checks(full)
            times.append(time.perf_counter() - start)
            assert all(r.outcome == "passed" for r in results), results
        print(f"default suite (9 checks): median {statistics.median(times) * 1000:.1f} ms, "
              f"max {max(times) * 1000:.1f} ms over {args.suites} runs")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
