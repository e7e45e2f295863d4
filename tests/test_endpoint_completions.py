"""Several prompts in one `/v1/completions` request, through the official `openai` client:
one engine stream per prompt, run together, merged as Dynamo 1.6.1 merges them (the
shapes are in docs/parity.md; the parity cases compare them byte for byte)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import orjson
import pytest

from endpoint_support import (  # noqa: F401  (fixtures by name)
    NAME,
    engine_loop,
    pipeline,
    post_request,
    registry,
    server,
    wait_until,
)
from shakedown.endpoint import EngineRegistry, LoopbackServer, RequestContext

WORDS = {3: [300, 301, 302], 2: [310, 311]}  # reply tokens by prompt length


async def by_prompt_length(
    request: dict[str, Any], context: RequestContext
) -> AsyncIterator[dict[str, Any]]:
    """Each prompt gets its own reply (picked by its token count), one token a frame."""
    for token in WORDS[len(request["token_ids"])]:
        await asyncio.sleep(0)
        yield {"token_ids": [token]}
    yield {"token_ids": [], "finish_reason": "stop"}


@pytest.fixture
def client(server: LoopbackServer) -> Iterator[openai.OpenAI]:  # noqa: F811
    url = f"http://127.0.0.1:{server.port}/v1"
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c:
        yield c


def texts(tokens: list[int], server: LoopbackServer) -> str:  # noqa: F811
    """What the pipeline makes of `tokens` as one reply."""
    return server.app.pipeline.decode(tokens)


def test_several_prompts_unary_one_body_in_index_order(
    client: openai.OpenAI,
    server: LoopbackServer,  # noqa: F811
    registry: EngineRegistry,  # noqa: F811
    engine_loop: asyncio.AbstractEventLoop | None,  # noqa: F811
) -> None:
    registry.register(NAME, by_prompt_length, loop=engine_loop)
    r = client.completions.create(model="tiny", prompt=[[1, 2, 3], [4, 5]], max_tokens=8, n=2)
    assert r.id.startswith("cmpl-") and r.id.count("-") == 5  # no per-prompt suffix
    # One engine choice per prompt (the engine makes one): indexes I × n.
    assert [c.index for c in r.choices] == [0, 2]
    assert [c.text for c in r.choices] == [
        texts(WORDS[3], server),
        texts(WORDS[2], server),
    ]
    assert all(c.finish_reason == "stop" for c in r.choices)
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 5)


def test_several_prompts_stream_ids_indexes_usage_and_one_done(
    client: openai.OpenAI,
    server: LoopbackServer,  # noqa: F811
    registry: EngineRegistry,  # noqa: F811
    engine_loop: asyncio.AbstractEventLoop | None,  # noqa: F811
) -> None:
    registry.register(NAME, by_prompt_length, loop=engine_loop)
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt=[[1, 2, 3], [4, 5]],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *choice_chunks, usage_chunk = chunks
    base = usage_chunk.id
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (5, 5)
    assembled: dict[int, str] = {0: "", 1: ""}
    for chunk in choice_chunks:
        [choice] = chunk.choices
        assert chunk.id == f"{base}-{choice.index}"
        assembled[choice.index] += choice.text
    assert assembled == {0: texts(WORDS[3], server), 1: texts(WORDS[2], server)}
    finishes = [c.choices[0].index for c in choice_chunks if c.choices[0].finish_reason]
    assert sorted(finishes) == [0, 1]


class Held:
    """Prompt 0 fails (or waits) while prompt 1 streams until told to stop."""

    def __init__(self, fail_first: bool) -> None:
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.open = 0
        self.closed = 0
        self.contexts: list[RequestContext] = []

    async def generate(
        self, request: dict[str, Any], context: RequestContext
    ) -> AsyncIterator[dict[str, Any]]:
        with self.lock:
            self.open += 1
            self.contexts.append(context)
        try:
            if self.fail_first and len(request["token_ids"]) == 3:
                await asyncio.sleep(0.01)
                raise RuntimeError("engine broke on prompt 0")
            while True:
                await asyncio.sleep(0.01)
                yield {"token_ids": [300]}
        finally:
            with self.lock:
                self.closed += 1


@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_error_on_one_prompt_ends_them_all(
    client: openai.OpenAI,
    server: LoopbackServer,  # noqa: F811
    registry: EngineRegistry,  # noqa: F811
    engine_loop: asyncio.AbstractEventLoop | None,  # noqa: F811
    stream: bool,
) -> None:
    engine = Held(fail_first=True)
    registry.register(NAME, engine.generate, loop=engine_loop)
    if stream:
        with pytest.raises(openai.APIError, match="Internal server error"):
            list(
                client.completions.create(
                    model="tiny", prompt=[[1, 2, 3], [4, 5]], max_tokens=10_000, stream=True
                )
            )
    else:
        with pytest.raises(openai.InternalServerError, match="Internal server error"):
            client.completions.create(model="tiny", prompt=[[1, 2, 3], [4, 5]], max_tokens=10_000)
    wait_until(lambda: engine.closed == engine.open == 2, what="both engine streams closed")
    assert all(c.is_stopped() for c in engine.contexts)
    wait_until(lambda: server.app.in_flight == 0, what="the request unwound")


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_disconnect_ends_every_prompt(
    server: LoopbackServer,  # noqa: F811
    registry: EngineRegistry,  # noqa: F811
    engine_loop: asyncio.AbstractEventLoop | None,  # noqa: F811
    stream: bool,
) -> None:
    engine = Held(fail_first=False)
    registry.register(NAME, engine.generate, loop=engine_loop)
    body = orjson.dumps(
        {"model": "tiny", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 10_000, "stream": stream}
    )
    conn = socket.create_connection(("127.0.0.1", server.port))
    conn.sendall(post_request(body, "/v1/completions"))
    wait_until(lambda: engine.open == 2, what="both engine streams started")
    conn.close()
    wait_until(lambda: engine.closed == 2, what="both engine streams closed")
    assert all(c.is_stopped() for c in engine.contexts)
    wait_until(lambda: server.app.in_flight == 0, what="the request unwound")
