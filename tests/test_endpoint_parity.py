"""Served bytes against Dynamo 1.6.1's captures: the same requests, the same model
(the reference harness's DeepSeek model dir) and the same scripted replies, through
the loopback endpoint and the shakedown mocker. Bodies must be identical once the
per-request values (ids, timestamps) are masked."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shakedown.endpoint import EngineRegistry, LocalEndpoint, ModelCard, build_pipeline
from shakedown.engines.mocker import Mocker, script_table

ROOT = Path(__file__).resolve().parent.parent
MODEL_BUILDER = ROOT / "tests" / "fixtures" / "build_model.py"

# The reference harness's scripted replies (`output_replay_id:SESSION:K`); EOS id is 1.
SCRIPT = {
    "tool": [
        '<think>plan</think>Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><EOS>'
    ],
    "text": ["<think>The user greets me.</think>Hello there! How can I help you today?<EOS>"],
    "noeos": ["<think>short</think>No EOS at the end."],
    "plain": ["Plain answer without any think tags.<EOS>"],
    "twotools": [
        '<think>two calls</think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call><EOS>'
    ],
    "unicode": ["<think>ü</think>Grüße, 世界! 👋<EOS>"],
    "after": [
        '<think>x</think>Before.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>After.<EOS>'
    ],
    "unknowntool": [
        '<think>x</think><tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call><EOS>'
    ],
    "badjson": [
        '<think>x</think><tool_call>{"name": "get_weather", "arguments": {city: Paris}</tool_call><EOS>'
    ],
    "nothinktool": [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><EOS>'
    ],
    "conv": ["<think>a</think>First turn.<EOS>", "<think>b</think>Second turn.<EOS>"],
}

# Captures not about this endpoint's bytes: other routes, a Dynamo mocker option, and
# the mocker's own 400 for a missing max_tokens. Replies that name no replay row are
# random in the reference, so they are left out too (see `capture_names`).
SKIP = re.compile(r"^(health|live|metrics|models|responses-.*|spy-.*|chat-unary-no-max-tokens)$")
MASKS = [
    (
        re.compile(
            rb"(chatcmpl|cmpl|call)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        ),
        rb"\1-ID",
    ),
    (re.compile(rb'"created":\d+'), b'"created":0'),
    # The reference mocker simulates a prefix cache; ours reports no cached tokens.
    (re.compile(rb'"cached_tokens":\d+'), b'"cached_tokens":0'),
]


def captures_dir() -> Path:
    for candidate in (
        ROOT / "tests" / "fixtures" / "pipeline" / "captures",
        ROOT.parent / "shared" / "reference" / "dynamo-1.6.1",
        ROOT.parent.parent / "shared" / "reference" / "dynamo-1.6.1",
    ):
        if candidate.is_dir():
            return candidate
    pytest.skip("no Dynamo 1.6.1 captures beside the project")


def capture_names() -> list[str]:
    try:
        directory = captures_dir()
    except pytest.skip.Exception:
        return []
    names = []
    for request in sorted(directory.glob("*.request")):
        response = directory / f"{request.stem}.http"
        if SKIP.match(request.stem) or not response.is_file():
            continue
        random_reply = b"output_replay_id" not in request.read_bytes()
        if random_reply and response.read_bytes().startswith(b"HTTP/1.1 200"):
            continue
        names.append(request.stem)
    return names


def split_http(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """Start line, headers and body of a capture (responses use CRLF, requests LF)."""
    separator = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    head, _, body = raw.partition(separator)
    first, *lines = head.decode().splitlines()
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return first, headers, body


def masked(body: bytes) -> bytes:
    for pattern, replacement in MASKS:
        body = pattern.sub(replacement, body)
    return body


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEndpoint]:
    if not MODEL_BUILDER.is_file():
        pytest.skip("tests/fixtures/build_model.py (the DeepSeek model fixture) is not here")
    model_dir = tmp_path_factory.mktemp("model-deepseek")
    subprocess.run(
        [sys.executable, str(MODEL_BUILDER), str(model_dir)], check=True, capture_output=True
    )
    card = ModelCard(
        str(model_dir),
        served_name="dsref",
        reasoning_parser="deepseek_r1",
        tool_call_parser="hermes",
    )
    pipeline = build_pipeline(card)
    registry = EngineRegistry()
    registry.register(
        card.endpoint, Mocker(replay=script_table(SCRIPT, pipeline.tokenize, 1)).generate
    )
    with LocalEndpoint(card, pipeline, registry) as ep:
        yield ep


@pytest.mark.parametrize("name", capture_names())
def test_served_bytes_match_the_reference(endpoint: LocalEndpoint, name: str) -> None:
    directory = captures_dir()
    request_line, request_headers, request_body = split_http(
        (directory / f"{name}.request").read_bytes()
    )
    method, path = request_line.split()
    status_line, reference_headers, reference_body = split_http(
        (directory / f"{name}.http").read_bytes()
    )
    base = endpoint.base_url.removesuffix("/v1")
    # Request files end with a newline that was not part of the body sent.
    r = httpx.request(
        method,
        base + path,
        content=request_body.removesuffix(b"\n"),
        headers=request_headers,
        timeout=10,
    )
    assert r.status_code == int(status_line.split()[1]), r.content
    for header in ("content-type", "cache-control", "allow"):
        assert r.headers.get(header) == reference_headers.get(header), header
    assert masked(r.content) == masked(reference_body)
