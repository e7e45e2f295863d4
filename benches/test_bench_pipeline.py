"""The postprocessing hot path through the Python binding: a streamed
1,000-token reply with reasoning and a tool call, one `Exchange.feed` per token.

    pytest benches/test_bench_pipeline.py --benchmark-enable -s
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import orjson
import pytest

from shakedown._core import Pipeline

MODEL_DIR = Path(__file__).parent.parent / "tests" / "fixtures" / "model-deepseek"
PARAGRAPH = (
    "The forecast for Zürich shows light rain in the morning, clearing by noon; "
    "temperatures stay between 7 and 12 °C. 東京の天気は晴れ。 "
)
BODY = orjson.dumps(
    {
        "model": "dsref",
        "messages": [{"role": "user", "content": "Weather?"}],
        "stream": True,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    }
)


def reply(paragraphs: int) -> str:
    call = '{"name": "get_weather", "arguments": {"city": "Zürich", "days": 3, "fields": ["temp", "rain"]}}'
    return (
        f"<think>{PARAGRAPH * paragraphs}</think>Here is the forecast. {PARAGRAPH * 4}"
        f"<tool_call>{call}</tool_call>"
    )


@pytest.fixture(scope="module")
def setup() -> tuple[Pipeline, list[bytes]]:
    pipeline = Pipeline(
        MODEL_DIR, served_name="dsref", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
    )
    paragraphs = 1
    while len(ids := pipeline.tokenize(reply(paragraphs))) < 1000:
        paragraphs += 1
    frames = [b'{"token_ids":[%d]}' % i for i in ids]
    frames.append(b'{"token_ids":[1],"finish_reason":"stop"}')
    return pipeline, frames


def stream_once(pipeline: Pipeline, frames: list[bytes]) -> int:
    exchange = pipeline.chat(BODY, "bench")
    feed = exchange.feed
    sent = 0
    for frame in frames:
        sent += len(feed(frame))
    return sent + len(exchange.finish())


def test_postprocess_stream(benchmark, setup) -> None:  # type: ignore[no-untyped-def]
    pipeline, frames = setup
    benchmark(stream_once, pipeline, frames)


def test_postprocess_per_token(setup, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    pipeline, frames = setup
    runs = []
    for _ in range(101):
        start = time.perf_counter_ns()
        stream_once(pipeline, frames)
        runs.append((time.perf_counter_ns() - start) / len(frames))
    with capsys.disabled():
        print(
            f"\npostprocess via Python, {len(frames)} tokens streamed: "
            f"median {statistics.median(runs):.0f} ns/token (includes request preprocessing)"
        )
