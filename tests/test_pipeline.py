"""The whole pipeline through the Python binding, held to the reference captures:
each captured request goes in as bytes, the engine frames the reference mocker
produced for it are fed back, and the bytes out must equal the captured body
(ids and `created` aside). Same fixtures as `cargo test --test pipeline_response`."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

import shakedown
from shakedown._core import Pipeline

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = FIXTURES / "pipeline" / "captures"
RESPONSES = sorted((FIXTURES / "pipeline" / "response").glob("*.json"))
MODEL_DIR = FIXTURES / "model-deepseek"
EOS = 1


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


def read_request(name: str) -> tuple[str, str, dict[str, str], bytes]:
    head, _, body = (CAPTURES / f"{name}.request").read_bytes().partition(b"\n\n")
    lines = head.decode().splitlines()
    method, path = lines[0].split(" ", 1)
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return method, path, headers, body.rstrip(b"\n")


def read_response(name: str) -> tuple[int, bytes]:
    raw = (CAPTURES / f"{name}.http").read_bytes()
    head, _, body = raw.partition(b"\r\n\r\n") if b"\r\n\r\n" in raw else raw.partition(b"\n\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


def normalize(text: str) -> str:
    text = re.sub(r"(cmpl-|call-)[0-9a-f-]{36}", r"\1<uuid>", text)
    return re.sub(r'"created":\d+', '"created":<created>', text)


def mocker_frames(pipeline: Pipeline, fixture: dict[str, Any]) -> list[bytes]:
    """The frames the reference mocker sends for a replayed script."""
    engine = fixture["engine"]
    ids = pipeline.tokenize(engine["text"]) + ([EOS] if engine["eos"] else [])
    prompt = fixture["plan"]["prompt_tokens"]

    def usage(completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {
                "audio_tokens": None,
                "cached_tokens": engine["cached_tokens"],
            },
        }

    frames: list[dict[str, Any]] = []
    for i, token in enumerate(ids):
        frame: dict[str, Any] = {"token_ids": [token], "tokens": None, "text": None}
        frame.update({"finish_reason": None, "index": None})
        if i == 0:
            frame["completion_usage"] = usage(1)
        frames.append(frame)
    frames.append({"token_ids": [], "finish_reason": "length", "completion_usage": usage(len(ids))})
    return [orjson.dumps(f) for f in frames]


REPLAYED = [
    p.stem
    for p in RESPONSES
    if json.loads(p.read_text())["engine"]["kind"] == "mocker_replay"
    and (CAPTURES / f"{p.stem}.request").exists()
]


@pytest.mark.parametrize("name", REPLAYED)
def test_capture_reproduced_end_to_end(pipeline: Pipeline, name: str) -> None:
    fixture = json.loads((FIXTURES / "pipeline" / "response" / f"{name}.json").read_text())
    _, path, _, body = read_request(name)
    surface = pipeline.chat if path.endswith("/chat/completions") else pipeline.completions
    exchange = surface(body, str(uuid.uuid4()))
    engine_request = orjson.loads(exchange.engine_request)  # the request-plane round trip
    assert engine_request["token_ids"], "the prompt was tokenized"
    out = bytearray()
    for frame in mocker_frames(pipeline, fixture):
        out += exchange.feed(frame)
        if exchange.finished:
            break
    out += exchange.finish()
    status, expected = read_response(name)
    assert exchange.status == status
    assert normalize(out.decode()) == normalize(expected.decode())


BODY_ERRORS = [
    p.stem
    for p in sorted(CAPTURES.glob("err-*.request"))
    if read_request(p.stem)[0] == "POST"
    and read_request(p.stem)[1] in ("/v1/chat/completions", "/v1/completions")
    and read_request(p.stem)[2].get("content-type", "").startswith("application/json")
    and read_response(p.stem)[0] >= 400
]


@pytest.mark.parametrize("name", BODY_ERRORS)
def test_error_capture_reproduced(pipeline: Pipeline, name: str) -> None:
    _, path, _, body = read_request(name)
    status, expected = read_response(name)
    surface = pipeline.chat if path.endswith("/chat/completions") else pipeline.completions
    try:
        surface(body, "r")
    except shakedown.RequestError as err:
        assert (err.status, err.body) == (status, expected.rstrip(b"\n"))
    else:
        pytest.fail(f"{name}: accepted, but the reference answered {status}")


def test_unknown_parser_is_refused_at_load() -> None:
    with pytest.raises(shakedown.UnknownParserError):
        Pipeline(MODEL_DIR, tool_call_parser="nope")


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
