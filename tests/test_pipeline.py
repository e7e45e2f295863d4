"""The whole pipeline through the Python binding, held to the reference captures:
each captured request goes in as bytes, the engine frames the reference mocker
produced for it are fed back, and the bytes out must equal the captured body
(ids and `created` aside). Same fixtures as `cargo test --test pipeline_response`."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

import shakedown
from captures import (
    EOS_ID,
    REPLAY_SCRIPT,
    capture_names,
    read_request,
    read_response,
)
from shakedown._core import Pipeline
from shakedown.endpoint import RequestContext
from shakedown.engines.mocker import Mocker, script_table
from shakedown.parity.normalize import mask_generated

FIXTURES = Path(__file__).parent / "fixtures"
MODEL_DIR = FIXTURES / "model-deepseek"


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    assert (MODEL_DIR / "tokenizer.json").exists(), "run python tests/fixtures/build_model.py"
    # The reference mocker's card reports no context length.
    return Pipeline(
        MODEL_DIR,
        served_name="dsref",
        reasoning_parser="deepseek_r1",
        tool_call_parser="hermes",
        context_length=0,
    )


def reference_mocker_frames(
    pipeline: Pipeline, engine_request: dict[str, Any], cached_tokens: int
) -> list[bytes]:
    """The frames the reference mocker sent for a replayed script: shakedown's mocker plays
    the same row; only the reference's simulated prefix-cache hits are copied in."""
    replay = script_table(REPLAY_SCRIPT, pipeline.tokenize, EOS_ID)

    async def play() -> list[dict[str, Any]]:
        context = RequestContext("r")
        return [frame async for frame in Mocker(replay=replay).generate(engine_request, context)]

    frames = asyncio.run(play())
    for frame in frames:
        if "completion_usage" in frame:
            frame["completion_usage"]["prompt_tokens_details"]["cached_tokens"] = cached_tokens
    return [orjson.dumps(frame) for frame in frames]


def names_a_replay_row(body: bytes) -> bool:
    """Whether a request picks a scripted reply (`nvext.annotations: output_replay_id:...`)."""
    try:
        request = json.loads(body)
    except ValueError:  # a request file that carries a note after its body
        return False
    annotations = (request.get("nvext") or {}).get("annotations") or []
    return any(a.startswith("output_replay_id:") for a in annotations)


# Replies the mocker replayed (one request named a row but was refused: no max_tokens).
REPLAYED = [
    name
    for name in capture_names()
    if names_a_replay_row(read_request(name).body) and read_response(name).status == 200
]


@pytest.mark.parametrize("name", REPLAYED)
def test_capture_reproduced_end_to_end(pipeline: Pipeline, name: str) -> None:
    request, expected = read_request(name), read_response(name)
    surface = pipeline.chat if request.path.endswith("/chat/completions") else pipeline.completions
    exchange = surface(request.body, str(uuid.uuid4()))
    engine_request = orjson.loads(exchange.engine_request)  # the request-plane round trip
    assert engine_request["token_ids"], "the prompt was tokenized"
    out = bytearray()
    # The reference mocker's simulated prefix-cache hits, as its answer reports them.
    cached = re.findall(rb'"cached_tokens":(\d+)', expected.body)
    cached_tokens = int(cached[-1]) if cached else 0
    for frame in reference_mocker_frames(pipeline, engine_request, cached_tokens):
        out += exchange.feed(frame)
        if exchange.finished:
            break
    out += exchange.finish()
    assert exchange.status == expected.status
    assert mask_generated(bytes(out)) == mask_generated(expected.body)


BODY_ERRORS = [
    name
    for name in capture_names()
    if name.startswith("err-")
    and read_request(name).method == "POST"
    and read_request(name).path in ("/v1/chat/completions", "/v1/completions")
    and read_request(name).headers.get("content-type", "").startswith("application/json")
    and read_response(name).status >= 400
]


@pytest.mark.parametrize("name", BODY_ERRORS)
def test_error_capture_reproduced(pipeline: Pipeline, name: str) -> None:
    request, expected = read_request(name), read_response(name)
    surface = pipeline.chat if request.path.endswith("/chat/completions") else pipeline.completions
    try:
        surface(request.body, "r")
    except shakedown.RequestError as err:
        assert (err.status, err.body) == (expected.status, expected.body.rstrip(b"\n"))
    else:
        pytest.fail(f"{name}: accepted, but the reference answered {expected.status}")


def test_unknown_parser_is_refused_at_load() -> None:
    with pytest.raises(shakedown.UnknownParserError):
        Pipeline(MODEL_DIR, tool_call_parser="nope")


def test_template_family_without_the_checkpoints_template_is_refused_at_load(
    tmp_path: Path,
) -> None:
    """`hf` reads `response_template` from tokenizer_config.json, as vLLM does; `beam` falls
    back to its built-in one."""
    for name in ("tokenizer.json", "config.json", "generation_config.json"):
        (tmp_path / name).write_bytes((MODEL_DIR / name).read_bytes())
    config = json.loads((MODEL_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(shakedown.ModelError, match="needs the checkpoint's response_template"):
        Pipeline(tmp_path, tool_call_parser="hf")
    assert Pipeline(tmp_path, tool_call_parser="beam", reasoning_parser="beam")
    config["response_template"] = {"fields": {}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(shakedown.ModelError, match="'fields' must be a non-empty object"):
        Pipeline(tmp_path, reasoning_parser="hf")


def test_missing_model_dir_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(shakedown.ModelError):
        Pipeline(tmp_path)


def test_engine_failure_mid_stream_ends_with_error_and_done(pipeline: Pipeline) -> None:
    body = orjson.dumps(
        {"model": "dsref", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    exchange = pipeline.chat(body, "r")
    sent = exchange.feed(orjson.dumps({"token_ids": pipeline.tokenize("<think>x</think>Hello")}))
    closing = exchange.fail("engine exploded")
    assert sent.startswith(b"data: ")
    events = closing.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    assert b"engine exploded" in closing


def unary_message(pipeline: Pipeline, extra: dict[str, Any], text: str) -> dict[str, Any]:
    """A unary chat reply to `text` as the engine's output, with `extra` in the request."""
    request = {"model": "dsref", "messages": [{"role": "user", "content": "hi"}], **extra}
    exchange = pipeline.chat(orjson.dumps(request), "r")
    exchange.feed(orjson.dumps({"token_ids": pipeline.tokenize(text)}))
    exchange.feed(orjson.dumps({"token_ids": [], "finish_reason": "stop"}))
    body = json.loads(exchange.finish() or b"{}")
    message: dict[str, Any] = body["choices"][0]["message"]
    return message


def test_thinking_switched_off_by_the_request_turns_reasoning_off(pipeline: Pipeline) -> None:
    text = "<think>plan</think>Hello"
    on = unary_message(pipeline, {}, text)
    assert (on.get("reasoning_content"), on["content"]) == ("plan", "Hello")
    off = unary_message(pipeline, {"chat_template_kwargs": {"thinking": False}}, text)
    assert (off.get("reasoning_content"), off["content"]) == (None, text)
    # DeepSeek's templates read `thinking`; `enable_thinking` does not switch them.
    other = unary_message(pipeline, {"chat_template_kwargs": {"enable_thinking": False}}, text)
    assert other.get("reasoning_content") == "plan"


def stream_exchange(pipeline: Pipeline, extra: dict[str, Any]) -> Any:
    request = {"model": "dsref", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return pipeline.chat(orjson.dumps({**request, **extra}), "00000000-0000-4000-8000-000000000000")


def token_frames(pipeline: Pipeline, text: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = [{"token_ids": [t]} for t in pipeline.tokenize(text)]
    return [*frames, {"token_ids": [], "finish_reason": "length"}]


@pytest.mark.parametrize(
    "extra",
    [{}, {"stop": ["there"]}],  # the stop string finishes the reply mid-batch
    ids=["whole", "stopped"],
)
def test_a_batch_gives_the_bytes_its_frames_give_one_by_one(
    pipeline: Pipeline, extra: dict[str, Any]
) -> None:
    frames = token_frames(pipeline, "<think>plan</think>Hello there, friend")
    one_by_one = stream_exchange(pipeline, extra)
    expected = b""
    for frame in frames:
        expected += one_by_one.feed(orjson.dumps(frame))
        if one_by_one.finished:
            break
    expected += one_by_one.finish()
    batched = stream_exchange(pipeline, extra)
    got = batched.feed(orjson.dumps(frames[:3])) + batched.feed(orjson.dumps(frames[3:]))
    assert batched.finished
    assert got + batched.finish() == expected
    assert (b"friend" in expected) == (not extra)


def test_a_malformed_frame_in_a_batch_fails_the_reply_after_the_frames_before_it(
    pipeline: Pipeline,
) -> None:
    frames = token_frames(pipeline, "Hello")
    out = stream_exchange(pipeline, {}).feed(orjson.dumps([frames[0], {"finish_reason": "?"}]))
    assert b"Hello" in out
    assert out.endswith(b"data: [DONE]\n\n") and b'"code":500' in out


def test_the_request_id_is_made_when_not_given(pipeline: Pipeline) -> None:
    body = orjson.dumps({"model": "dsref", "messages": [{"role": "user", "content": "hi"}]})
    made = pipeline.chat(body).request_id
    assert uuid.UUID(made).version == 4 and str(uuid.UUID(made)) == made
    assert made != pipeline.chat(body).request_id
    assert pipeline.chat(body, "given").request_id == "given"
    assert orjson.loads(pipeline.completions(b'{"model":"dsref","prompt":"x"}').engine_request)
