"""The parity runner against the saved Dynamo 1.6.1 captures: the live reference stack must
reproduce every deterministic capture once the runner's masking is applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from captures import CACHE_HIT, CAPTURES, read_request, read_response
from shakedown.parity import Case, Response, normalized_lines, parse_endpoint
from shakedown.parity.cases import Request
from shakedown.parity.client import fetch

from .conftest import Dynamo


def load_request(path: Path) -> Request:
    captured = read_request(path.stem)
    case = Case(name=path.stem, path=captured.path, method=captured.method)
    body = captured.body or None
    return Request(case, "unary", captured.method, captured.path, captured.headers, body)


def load_response(path: Path) -> Response:
    captured = read_response(path.stem)
    return Response(captured.status, captured.headers, captured.body)


# Not reproducible by a fresh stack: random mocker output (no replay id), a mocker started
# with other flags, the spy worker, and pages that list instance ids, ports or counters.
NOT_REPLAYABLE = (
    "chat-stream-random",
    "chat-unary-random",
    "chat-stream-mocker-reasoning-flag",
    "err-n2",
    "health",
    "metrics",
    "spy-",
)


def replayable(request_path: Path) -> bool:
    stem = request_path.stem
    return request_path.with_suffix(".http").is_file() and not stem.startswith(NOT_REPLAYABLE)


REQUESTS = sorted(p for p in CAPTURES.glob("*.request") if replayable(p))


def test_captures_are_there() -> None:
    assert len(REQUESTS) >= 40, f"expected the reference captures in {CAPTURES}"


@pytest.mark.parametrize("request_path", REQUESTS, ids=[p.stem for p in REQUESTS])
def test_live_reference_reproduces_capture(dynamo: Dynamo, request_path: Path) -> None:
    request = load_request(request_path)
    live = fetch(parse_endpoint(dynamo.base_url), request)
    saved = load_response(request_path.with_suffix(".http"))
    assert normalized_lines(live, [CACHE_HIT]) == normalized_lines(saved, [CACHE_HIT])
