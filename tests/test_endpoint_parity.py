"""Served bytes against Dynamo 1.6.1's captures: the same requests, the same model
(the reference harness's DeepSeek model dir) and the same scripted replies, through
the loopback endpoint and the shakedown mocker (its outputs one by one, and in batches).
Bodies must be identical once the per-request values (ids, timestamps) are masked."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from captures import CACHE_HIT, EOS_ID, REPLAY_SCRIPT, capture_names, read_request, read_response
from shakedown.endpoint import EngineRegistry, LocalEndpoint, ModelCard, build_pipeline
from shakedown.engines.mocker import Mocker, script_table
from shakedown.parity import Response, normalized_lines

ROOT = Path(__file__).resolve().parent.parent
MODEL_BUILDER = ROOT / "tests" / "fixtures" / "build_model.py"

# Captures not about this endpoint's bytes: other routes, a Dynamo mocker option, and
# the mocker's own 400 for a missing max_tokens. Replies that name no replay row are
# random in the reference, so they are left out too.
SKIP = re.compile(r"^(health|live|metrics|models|responses-.*|spy-.*|chat-unary-no-max-tokens)$")


def served_captures() -> list[str]:
    names = []
    for name in capture_names():
        request, response = read_request(name), read_response(name)
        if SKIP.match(name) or (b"output_replay_id" not in request.body and response.status == 200):
            continue
        names.append(name)
    return names


# The mocker's outputs one per item, and in batches (lists of the outputs ready at once).
@pytest.fixture(scope="module", params=["generate", "generate_batches"])
def endpoint(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LocalEndpoint]:
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
    mocker = Mocker(replay=script_table(REPLAY_SCRIPT, pipeline.tokenize, EOS_ID))
    registry.register(card.endpoint, getattr(mocker, request.param))
    with LocalEndpoint(card, pipeline, registry) as ep:
        yield ep


@pytest.mark.parametrize("name", served_captures())
def test_served_bytes_match_the_reference(endpoint: LocalEndpoint, name: str) -> None:
    request, reference = read_request(name), read_response(name)
    base = endpoint.base_url.removesuffix("/v1")
    r = httpx.request(
        request.method,
        base + request.path,
        content=request.body,
        headers=request.headers,
        timeout=10,
    )
    served = Response(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)
    # Ours reports no cached tokens; the reference simulated a prefix cache.
    assert normalized_lines(served, [CACHE_HIT]) == normalized_lines(
        Response(reference.status, reference.headers, reference.body), [CACHE_HIT]
    )
