"""The binding from several threads at once, with the real DeepSeek tokenizer: one
`Pipeline` shared by threads gives each request the bytes it gives it alone, large
inputs are worked on with the GIL released, and a prompt that cannot fit the
context is refused without being tokenized."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

import shakedown
from shakedown._core import Pipeline
from shakedown.parsers import ChatParser

MODEL_DIR = Path(__file__).parent / "fixtures" / "model-deepseek"
EOS = 1
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    assert (MODEL_DIR / "tokenizer.json").exists(), "run python tests/fixtures/build_model.py"
    return Pipeline(
        MODEL_DIR, served_name="m", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
    )


@pytest.fixture
def no_forced_switches() -> Iterator[None]:
    """A thread keeps the GIL until it lets go of it itself."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def chat_body(content: str, *, stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": content}],
            "tools": TOOLS,
            "stream": stream,
            "max_tokens": 64,
        }
    )


def exchange_bytes(pipeline: Pipeline, body: bytes, reply: str) -> tuple[bytes, bytes]:
    """The engine request and every response byte for `body`, the engine replying `reply`."""
    exchange = pipeline.chat(body, "00000000-0000-4000-8000-000000000000")
    out = bytearray()
    for token in [*pipeline.tokenize(reply), EOS]:
        out += exchange.feed(orjson.dumps({"token_ids": [token]}))
    out += exchange.finish()
    return exchange.engine_request, bytes(out)


def masked(data: bytes) -> bytes:
    """Without the values that differ per response: call ids and `created`."""
    data = re.sub(rb"call-[0-9a-f-]{36}", b"call-ID", data)
    return re.sub(rb'"created":\d+', b'"created":0', data)


def test_threads_sharing_a_pipeline_get_what_one_thread_gets(pipeline: Pipeline) -> None:
    reply = (
        '<think>plan</think>Sure.<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    )
    cases = [
        (chat_body(f"question {i} " + "ü世界 " * (i * 800), stream=i % 2 == 0), reply)
        for i in range(8)
    ]
    alone = [exchange_bytes(pipeline, body, text) for body, text in cases]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda case: exchange_bytes(pipeline, *case), cases * 4))
    for i, (engine_request, out) in enumerate(together):
        expected_request, expected_out = alone[i % len(cases)]
        assert engine_request == expected_request
        assert masked(out) == masked(expected_out)


def runs_alongside(work: Callable[[], object], rounds: int = 200) -> bool:
    """Whether the main thread gets to run while another thread repeats `work`. With
    forced switches off, only `work` letting go of the GIL lets it in; then the other
    thread stops after the round it is in, else it does every round. Many rounds, because on
    a loaded machine the main thread may not be scheduled within the first few releases."""
    started, main_ran = threading.Event(), threading.Event()
    done = 0

    def repeat() -> None:
        nonlocal done
        started.set()
        while not main_ran.is_set() and done < rounds:
            work()
            done += 1

    worker = threading.Thread(target=repeat)
    worker.start()
    assert started.wait(timeout=60)
    main_ran.set()
    worker.join(timeout=300)
    assert not worker.is_alive()
    return done < rounds


def test_preprocessing_a_large_request_lets_other_threads_run(no_forced_switches: None) -> None:
    roomy = Pipeline(MODEL_DIR, served_name="m", context_length=10**8)
    body = chat_body("lorem ipsum dolor sit amet " * 20_000, stream=False)
    assert runs_alongside(lambda: roomy.chat(body, "r"))


def test_parsing_large_text_lets_other_threads_run(no_forced_switches: None) -> None:
    parser = ChatParser(reasoning="deepseek_r1", tool_call="hermes", tools=TOOLS)
    text = "reasoning about the weather " * 20_000
    assert runs_alongside(lambda: parser.feed(text))


def test_tokenizing_large_text_lets_other_threads_run(
    pipeline: Pipeline, no_forced_switches: None
) -> None:
    text = "lorem ipsum dolor sit amet " * 20_000
    assert runs_alongside(lambda: pipeline.tokenize(text))


def test_a_prompt_longer_than_the_context_is_refused() -> None:
    small = Pipeline(MODEL_DIR, served_name="m", context_length=4096)
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": " " * 4096 * 200}]})
    with pytest.raises(shakedown.RequestError) as refused:
        small.chat(body, "r")
    assert refused.value.status == 400
    message = orjson.loads(refused.value.body)["message"]
    assert message.startswith("This model's maximum context length is 4096 tokens. However,")
    assert int(message.split("resulted in ")[1].split()[0]) >= 4096


def test_invalid_tools_are_a_value_error() -> None:
    with pytest.raises(shakedown.InvalidToolsError) as raised:
        ChatParser(tool_call="qwen3_coder", tools=[{"type": "function", "function": {}}])
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, shakedown.ShakedownError)
