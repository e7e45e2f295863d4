"""The Dynamo 1.6.1 reference captures (`fixtures/pipeline/captures`), read one way by every
test, and the replay script the reference harness's mocker played for them.

Standard library only: `tests/parity/build_trace.py` and the fixture generator import it
outside this project's environment.

A capture is a pair of files: `NAME.request` (`METHOD PATH`, header lines and the body after a
blank line, LF line ends, the body followed by a newline that was not sent) and `NAME.http`
(the response as received: status line, headers, a blank line, the body).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pipeline"
CAPTURES = FIXTURES / "captures"

REPLAY_SCRIPT: dict[str, list[str]] = json.loads(
    (FIXTURES / "replay_script.json").read_text(encoding="utf-8")
)
"""Session -> turns: a request picks turn K of SESSION with `output_replay_id:SESSION:K`. A
trailing `EOS_MARK` stands for the model's EOS id; without it the reply ends on `length`."""
EOS_MARK = "<EOS>"
EOS_ID = 1
"""The EOS id of the DeepSeek model the captures were made with (`fixtures/build_model.py`)."""

CACHE_HIT = "usage.prompt_tokens_details.cached_tokens"
"""The reference mocker simulated a prefix cache while capturing; fresh stacks may differ."""


@dataclass(frozen=True)
class CapturedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class CapturedResponse:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


def _split(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    separator = b"\r\n\r\n" if b"\r\n\r\n" in raw else b"\n\n"
    head, _, body = raw.partition(separator)
    first, *lines = head.decode().splitlines()
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return first, headers, body


def read_request(name: str, directory: Path = CAPTURES) -> CapturedRequest:
    first, headers, body = _split((directory / f"{name}.request").read_bytes())
    method, path = first.split(" ", 1)
    return CapturedRequest(method, path, headers, body.removesuffix(b"\n"))


def read_response(name: str, directory: Path = CAPTURES) -> CapturedResponse:
    first, headers, body = _split((directory / f"{name}.http").read_bytes())
    return CapturedResponse(int(first.split(" ", 2)[1]), headers, body)


def capture_names(directory: Path = CAPTURES) -> list[str]:
    """Every capture with both its files, sorted."""
    return sorted(p.stem for p in directory.glob("*.request") if p.with_suffix(".http").is_file())
