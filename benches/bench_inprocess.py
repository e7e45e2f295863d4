#!/usr/bin/env python3
"""The pipeline's own CPU per request, in process (issue 14).

`shakedown serve`'s pipeline (packaged tiny model, deepseek_r1 + hermes, as `shakedown serve`
builds it) runs `bench_endpoint`'s chat request over and over with no host: `Pipeline.chat`
(parse, validate, template, tokenize, engine request), `orjson.loads` of the engine request (as
the endpoint does), then `Exchange.feed` for each of the frames the mocker answered with
(captured once, replay row `text:0`: 21 tokens and EOS) and `Exchange.finish`. Each stage is
timed with this thread's CPU clock; a round is N requests, a stage's figure for the round the
mean per request, and the report gives the min and the median over rounds: on a shared machine
the min is the figure least touched by other jobs.

With --before DIR the same rounds also run against another checkout's `python/` (with its
built `_core`), and with --build NAME=DIR (repeatable) against further ones: one worker
process per build, rounds alternated (each round starting with the next build), so all see
the same load. Compare the rows of one run.

usage: python benches/bench_inprocess.py [--rounds 15] [--requests 400] [--stream]
                                         [--before DIR] [--build NAME=DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from time import thread_time_ns
from typing import Any

HERE = Path(__file__).resolve()
STAGES = ("chat", "loads", "feed", "finish", "total")


class Worker:
    """The pipeline and the captured frames, ready to run rounds."""

    def __init__(self, stream: bool) -> None:
        import orjson

        from bench_endpoint import chat_body
        from shakedown.cli import TINY_MODEL, TINY_NAME, TINY_PARSERS, make_mocker
        from shakedown.endpoint import ModelCard, RequestContext, build_pipeline
        from shakedown.endpoint.frames import as_frame

        reasoning, tools = TINY_PARSERS
        card = ModelCard(
            str(TINY_MODEL),
            served_name=TINY_NAME,
            reasoning_parser=reasoning,
            tool_call_parser=tools,
        )
        self.pipeline = build_pipeline(card)
        self.body = chat_body(stream)
        mocker = make_mocker(self.pipeline, TINY_MODEL)
        request = orjson.loads(self.pipeline.chat(self.body, "r").engine_request)

        async def frames() -> list[bytes]:
            return [as_frame(item) async for item in mocker.generate(request, RequestContext("r"))]

        self.frames = asyncio.run(frames())
        self.loads = orjson.loads
        # The reply, to check both builds answer alike (the request id and `created` aside).
        self.reply = self.request()

    def request(self) -> bytes:
        exchange = self.pipeline.chat(self.body, "r")
        self.loads(exchange.engine_request)
        out = b"".join(exchange.feed(frame) for frame in self.frames)
        return out + exchange.finish()

    def round(self, count: int) -> dict[str, float]:
        """Mean thread-CPU microseconds per request, per stage, over `count` requests."""
        clock = thread_time_ns
        chat = self.pipeline.chat
        loads, frames, body = self.loads, self.frames, self.body
        sums = [0, 0, 0, 0]
        for _ in range(count):
            t0 = clock()
            exchange = chat(body, "r")
            t1 = clock()
            loads(exchange.engine_request)
            t2 = clock()
            for frame in frames:
                exchange.feed(frame)
            t3 = clock()
            exchange.finish()
            t4 = clock()
            sums[0] += t1 - t0
            sums[1] += t2 - t1
            sums[2] += t3 - t2
            sums[3] += t4 - t3
        per = [s / count / 1000 for s in sums]
        return dict(zip(STAGES, [*per, sum(per)], strict=True))


def serve_worker(stream: bool) -> int:
    """Worker process: build, say ready, then run one round per line read from stdin."""
    import shakedown

    worker = Worker(stream)
    hello = {"frames": len(worker.frames), "reply": worker.reply.decode()}
    print(json.dumps({**hello, "from": shakedown.__file__}), flush=True)
    for line in sys.stdin:
        print(json.dumps(worker.round(int(line))), flush=True)
    return 0


def start(python_dir: str | None, stream: bool) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = dict(os.environ)
    paths = [str(HERE.parent)] + ([python_dir] if python_dir else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    args = [sys.executable, str(HERE), "--worker"] + (["--stream"] if stream else [])
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def comparable(reply: str) -> str:
    """The reply with its per-request fields (id, created) blanked."""
    import re

    return re.sub(r'"(id|created)":("[^"]*"|\d+)', r'"\1":_', reply)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=400, help="per round")
    parser.add_argument("--stream", action="store_true", help="the streaming request")
    parser.add_argument("--before", help="a python/ dir to run as the row `before`")
    parser.add_argument(
        "--build", action="append", default=[], help="NAME=DIR: a python/ dir as the row NAME"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return serve_worker(args.stream)

    rows: dict[str, str | None] = {} if args.before is None else {"before": args.before}
    for build in args.build:
        name, _, path = build.partition("=")
        rows[name] = path
    rows["after"] = None
    workers = {name: start(path, args.stream) for name, path in rows.items()}
    replies = {comparable(hello["reply"]) for _, hello in workers.values()}
    if len(replies) != 1:
        print("the builds answer differently:", *replies, sep="\n", file=sys.stderr)
        return 1
    frames = next(iter(workers.values()))[1]["frames"]
    for name, (_proc, hello) in workers.items():
        print(f"{name}: {Path(hello['from']).parent.parent}")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in rows}
    names = list(workers)
    for i in range(args.rounds):
        # Each round starts with the next build, so that no build always goes first.
        for name in names[i % len(names) :] + names[: i % len(names)]:
            proc = workers[name][0]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{args.requests}\n")
            proc.stdin.flush()
            results[name].append(json.loads(proc.stdout.readline()))
    for proc, _hello in workers.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()

    kind = "stream" if args.stream else "unary"
    print(
        f"{kind} request, {frames} frames; thread CPU us per request, "
        f"{args.rounds} rounds x {args.requests}: min / median"
    )
    print("| build | " + " | ".join(STAGES) + " |")
    print("|---|" + "---:|" * len(STAGES))
    for name, rounds in results.items():
        cells = []
        for stage in STAGES:
            values = [r[stage] for r in rounds]
            cells.append(f"{min(values):.2f} / {statistics.median(values):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
