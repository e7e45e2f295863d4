"""shakedown.integrations.dynamo against the real ai-dynamo-runtime 1.6.1 and its mocker."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shakedown.integrations.dynamo import DynamoEngine, DynamoEngineError, HeldRegistration

from . import stack
from .conftest import Dynamo


class Ctx:
    """The loopback's per-request context, as an engine sees it."""

    def __init__(self) -> None:
        self.stopped = False

    def is_stopped(self) -> bool:
        return self.stopped


def _request(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": stack.MODEL_NAME,
        "token_ids": [0, 128803, 19923, 128804],
        "stop_conditions": {"max_tokens": 64, "stop_token_ids_hidden": [1]},
        "sampling_options": {},
        "output_options": {},
        "eos_token_ids": [1],
        "annotations": [],
    }
    base.update(kw)
    return base


def _row(trace: Path, session: str, turn: int) -> list[int]:
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    ids: list[int] = [r for r in rows if r["session_id"] == session][turn]["output_token_ids"]
    return ids


async def _collect(engine: DynamoEngine, request: dict[str, Any], ctx: Ctx) -> list[dict[str, Any]]:
    return [frame async for frame in engine.generate(request, ctx)]


def test_replays_a_trace_row_through_the_request_plane(dynamo_core: Any, trace: Path) -> None:
    async def main() -> list[dict[str, Any]]:
        engine = DynamoEngine(stack.ENDPOINT)
        try:
            return await _collect(engine, _request(annotations=["output_replay_id:conv:1"]), Ctx())
        finally:
            engine.shutdown()

    frames = asyncio.run(main())
    ids = [t for f in frames for t in f["token_ids"]]
    assert ids == _row(trace, "conv", 1)
    assert frames[-1]["token_ids"] == [] and frames[-1]["finish_reason"] == "length"
    assert frames[-1]["completion_usage"]["completion_tokens"] == len(ids)


def test_invalid_request_is_a_400_engine_error(dynamo_core: Any) -> None:
    async def main() -> None:
        engine = DynamoEngine(stack.ENDPOINT)
        try:
            await _collect(engine, {"token_ids": [1, 2]}, Ctx())
        finally:
            engine.shutdown()

    with pytest.raises(DynamoEngineError) as err:
        asyncio.run(main())
    assert err.value.status == 400 and err.value.kind == "InvalidArgument"
    assert "max_tokens" in str(err.value)


def test_stopped_context_ends_the_stream_early(dynamo_core: Any) -> None:
    async def main() -> int:
        engine = DynamoEngine(stack.ENDPOINT)
        ctx = Ctx()
        seen = 0
        try:
            # No replay id: the mocker emits random ids up to max_tokens.
            request = _request(stop_conditions={"max_tokens": 2000})
            async for _ in engine.generate(request, ctx):
                seen += 1
                if seen == 3:
                    ctx.stopped = True
        finally:
            engine.shutdown()
        return seen

    assert asyncio.run(main()) == 3


def test_missing_endpoint_times_out_as_503(dynamo_core: Any) -> None:
    async def main() -> None:
        engine = DynamoEngine("nobody.backend.generate", wait_timeout_s=0.5)
        try:
            await _collect(engine, _request(), Ctx())
        finally:
            engine.shutdown()

    with pytest.raises(DynamoEngineError) as err:
        asyncio.run(main())
    assert err.value.status == 503
    with pytest.raises(ValueError, match=r"namespace\.component\.endpoint"):
        DynamoEngine("backend.generate")


def _listed(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=5) as resp:
        return [m["id"] for m in json.loads(resp.read())["data"]]


def _chat(base_url: str, model: str) -> dict[str, Any]:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    ).encode()
    req = urllib.request.Request(
        f"{base_url}/v1/chat/completions", body, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        reply: dict[str, Any] = json.loads(resp.read())
        return reply


async def _wait_listed(base_url: str, model: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if model in await asyncio.to_thread(_listed, base_url):
            return True
        await asyncio.sleep(0.2)
    return False


def test_held_registration_publishes_only_on_release(
    dynamo_core: Any, dynamo: Dynamo, model_dir: Path
) -> None:
    """A Python worker behind the real frontend: invisible while held, served after release."""
    core = dynamo_core
    name = "held-model"

    async def main() -> tuple[bool, bool, dict[str, Any], list[str]]:
        runtime = core.DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
        endpoint = runtime.endpoint("held.backend.generate")

        async def generate(request: dict[str, Any], context: Any = None) -> Any:
            for token in (128821, 67, 128822, 19923, 1):  # <think>…</think>Hello<EOS>
                yield {"token_ids": [token]}
            yield {"token_ids": [], "finish_reason": "stop"}

        serving = asyncio.ensure_future(endpoint.serve_endpoint(generate))
        config = core.ModelRuntimeConfig()
        config.reasoning_parser = "deepseek_r1"
        held = HeldRegistration()
        try:
            await held.register_model(
                core.ModelInput.Tokens, core.ModelType.Chat, endpoint, str(model_dir), name,
                worker_type=core.WorkerType.Aggregated, runtime_config=config,
            )  # fmt: skip
            (registration,) = held.registrations()
            assert (registration.model_name, registration.model_path) == (name, str(model_dir))
            assert (registration.model_input, registration.worker_type) == ("tokens", "aggregated")
            assert registration.model_type == {"chat"}
            assert (registration.reasoning_parser, registration.tool_call_parser) == (
                "deepseek_r1",
                None,
            )
            assert held.pending == 1 and not held.released
            listed_while_held = await _wait_listed(dynamo.base_url, name, 3.0)
            await held.release()
            listed_after = await _wait_listed(dynamo.base_url, name, 20.0)
            reply = await asyncio.to_thread(_chat, dynamo.base_url, name)
            await core.unregister_model(endpoint)
            return (
                listed_while_held,
                listed_after,
                reply,
                await asyncio.to_thread(_listed, dynamo.base_url),
            )
        finally:
            serving.cancel()
            runtime.shutdown()

    while_held, after, reply, models = asyncio.run(main())
    assert not while_held
    assert after
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] is not None and message["content"] is not None
    assert stack.MODEL_NAME in models
