"""The parity runner against the saved Dynamo 1.6.1 captures: the live reference stack must
reproduce every deterministic capture once the runner's masking is applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from shakedown.parity import Case, Response, normalized_lines, parse_endpoint
from shakedown.parity.cases import Request
from shakedown.parity.client import fetch

from .conftest import Dynamo

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pipeline" / "captures"
# Prefix caching was on while capturing (the suite turns it off), so hits may differ.
CACHE_HIT = "usage.prompt_tokens_details.cached_tokens"


def load_request(path: Path) -> Request:
    head, _, body = path.read_bytes().partition(b"\n\n")
    lines = head.decode().splitlines()
    method, target = lines[0].split(" ", 1)
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    body = body.split(b"\n", 1)[0]
    case = Case(name=path.stem, path=target, method=method)
    return Request(case, "unary", method, target, headers, body or None)


def load_response(path: Path) -> Response:
    raw = path.read_bytes()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return Response(int(lines[0].split()[1]), headers, body)


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
