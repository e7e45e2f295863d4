"""Attaching the endpoint to a worker: card selection, and engines that live on the
worker's own event loop."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from endpoint_support import (
    CHAT,
    NAME,
    TINY,
    counting_engine,
    sse_events,
)
from shakedown.endpoint import (
    Engine,
    EngineRegistry,
    LoopbackServer,
    ModelCard,
    RequestContext,
    attach,
)
from shakedown.engines.mocker import Mocker
from shakedown.validation import HealthServer, ValidationConfig, WorkerValidation
from validation_helpers import tiny_card, tiny_engine


def test_attach_serves_the_first_eligible_card(
    registry: EngineRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    cards = [
        ModelCard(str(TINY), served_name="adapter", lora="my-lora"),
        ModelCard(str(TINY), served_name="prefill", worker_type="prefill"),
        ModelCard(
            str(TINY), served_name="tiny", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
        ),
    ]
    endpoint = attach(cards, registry)
    assert endpoint is not None
    try:
        assert endpoint.model == "tiny"
        assert endpoint.base_url == f"http://127.0.0.1:{endpoint.port}/v1"
        registry.register(cards[2].endpoint, Mocker(default=[300, 301, 1]).generate)
        r = httpx.post(f"{endpoint.base_url}/chat/completions", json=CHAT)
        assert r.status_code == 200
    finally:
        assert endpoint.stop()
    assert "adapter" in caplog.text and "LoRA" in caplog.text
    assert "prefill-only" in caplog.text


def test_attach_with_no_eligible_card_opens_nothing(
    registry: EngineRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    assert attach(ModelCard(str(TINY), model_input="text"), registry) is None
    assert "input is text, not tokens" in caplog.text


@pytest.mark.parametrize("named", [True, False], ids=["loop-named", "loop-of-the-caller"])
def test_engine_runs_on_the_workers_loop(
    server: LoopbackServer, registry: EngineRegistry, named: bool
) -> None:
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"

    async def worker() -> tuple[list[bool], httpx.Response, httpx.Response]:
        loop = asyncio.get_running_loop()
        handoff: asyncio.Queue[int] = asyncio.Queue()  # bound to this loop on first use
        ran_here: list[bool] = []

        async def generate(
            request: dict[str, Any], context: RequestContext
        ) -> AsyncIterator[dict[str, Any]]:
            ran_here.append(asyncio.get_running_loop() is loop)
            for i in range(3):
                await handoff.put(300 + i)
                yield {"token_ids": [await handoff.get()]}
            yield {"token_ids": [], "finish_reason": "length"}

        # Registered from the worker's coroutine, the engine belongs to its loop.
        registry.register(NAME, generate, loop=loop if named else None)
        unary = await asyncio.to_thread(httpx.post, url, json=CHAT)
        streamed = await asyncio.to_thread(httpx.post, url, json={**CHAT, "stream": True})
        return ran_here, unary, streamed

    ran_here, unary, streamed = asyncio.run(worker())
    assert ran_here == [True, True]
    assert unary.status_code == 200
    assert unary.json()["usage"]["completion_tokens"] == 3
    assert sse_events(streamed.content)[-1] == b"data: [DONE]"


def test_engine_whose_loop_has_stopped_is_an_engine_error(
    client: httpx.Client, registry: EngineRegistry
) -> None:
    loop = asyncio.new_event_loop()
    registry.register(NAME, counting_engine(), loop=loop)
    try:
        assert client.post("/v1/chat/completions", json=CHAT).status_code == 500
    finally:
        loop.close()


class LoopBoundEngine:
    """Shaped like a real engine client: made on the worker's loop, it keeps that loop, and a
    scheduler task there serves each request, answering through a future of that loop."""

    def __init__(self, engine: Engine) -> None:
        self._loop = asyncio.get_running_loop()
        self._engine = engine
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._scheduler = self._loop.create_task(self._schedule())

    async def _schedule(self) -> None:
        while True:
            request, context, reply = await self._inbox.get()
            try:
                reply.set_result([frame async for frame in self._engine(request, context)])
            except Exception as err:
                reply.set_exception(err)

    async def generate(
        self, request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        reply = self._loop.create_future()
        self._inbox.put_nowait((request, context, reply))
        # On any other loop: "Task got Future attached to a different loop".
        for frame in await reply:
            yield frame

    def close(self) -> None:
        self._scheduler.cancel()


def test_the_kubernetes_worker_pattern_with_an_engine_bound_to_the_workers_loop(
    tmp_path: Path,
) -> None:
    # docs/kubernetes-worker.md: from_env, a health server, attach(card, engine) from the
    # worker's coroutine, await released(). The gate is the reference check runner.
    check = shlex.join([sys.executable, "-m", "shakedown.checks"])
    environ = {
        "DYN_WORKER_VALIDATION_GATES": f"exec:{check}",
        "DYN_WORKER_VALIDATION_HOLD": "health",
    }
    validation = WorkerValidation(ValidationConfig.from_env(environ), log_dir=tmp_path)

    async def worker() -> tuple[int, int]:
        health = HealthServer(validation)
        health.start()
        engine = LoopBoundEngine(tiny_engine())
        try:
            assert validation.attach(tiny_card(), engine.generate) is not None
            held = await asyncio.to_thread(
                httpx.get, f"http://127.0.0.1:{health.port}/health", timeout=5
            )
            # A held worker never returns from released(): wait for either outcome.
            deadline = time.monotonic() + 60
            while validation.state not in ("released", "held"):
                assert time.monotonic() < deadline, validation.reason
                await asyncio.sleep(0.05)
            ready = await asyncio.to_thread(
                httpx.get, f"http://127.0.0.1:{health.port}/health", timeout=5
            )
            return held.status_code, ready.status_code
        finally:
            engine.close()
            health.stop()

    try:
        while_held, after = asyncio.run(worker())
        report = validation.wait_finished(10)
        assert report is not None
        assert report.status == "released", report.gates[0].log_tail if report.gates else report
        assert "OK: of 9 checks 9 passed" in report.gates[0].log_tail
        assert (while_held, after) == (503, 200)
    finally:
        validation.close()
