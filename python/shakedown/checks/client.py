"""The check runner's OpenAI-endpoint client: JSON requests and whole SSE streams, each request
bounded by one deadline (``shakedown.httpclient``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from shakedown.httpclient import Incoming, Response, Url, exchange, parse_url, request

__all__ = ["Client", "Response", "Stream"]


@dataclass
class Stream:
    """A server-sent event stream, read whole, with what was wrong with its framing."""

    status: int
    content_type: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    problems: list[str] = field(default_factory=list)
    body: bytes = b""
    # When each chunk arrived, in seconds after the request was sent (for latency checks).
    sent_at: float = 0.0
    chunk_times: list[float] = field(default_factory=list)


class Client:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        try:
            self._base: Url = parse_url(base_url)
        except ValueError as exc:
            raise ValueError(f"OPENAI_BASE_URL: {exc}") from None
        self.base_url = base_url
        self._api_key = api_key
        self._timeout_s = timeout_s

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def get(self, path: str) -> Response:
        return self._send("GET", path, None)

    def post(self, path: str, payload: Any) -> Response:
        return self._send("POST", path, orjson.dumps(payload))

    def post_raw(self, path: str, body: bytes) -> Response:
        return self._send("POST", path, body)

    def _send(self, method: str, path: str, body: bytes | None) -> Response:
        return request(
            method,
            self._base.at(path),
            timeout_s=self._timeout_s,
            body=body,
            headers=self._headers("*/*"),
        )

    def stream(self, path: str, payload: Any) -> Stream:
        """POST with ``stream: true`` and read the SSE stream, noting every framing problem."""
        sent_at = time.monotonic()
        with exchange(
            "POST",
            self._base.at(path),
            timeout_s=self._timeout_s,
            body=orjson.dumps(payload),
            headers=self._headers("text/event-stream"),
        ) as response:
            result = Stream(response.status, response.content_type, sent_at=sent_at)
            if response.status != 200:
                result.body = response.read()
                return result
            _read_events(response, result)
            return result


def _read_events(response: Incoming, result: Stream) -> None:
    data_lines: list[bytes] = []
    while True:
        raw = response.readline()
        if not raw:
            break
        line = raw.rstrip(b"\r\n")
        if line:
            if line.startswith(b"data:"):
                # Both "data: x" and the older "data:x" are valid SSE.
                data_lines.append(line[5:].removeprefix(b" "))
            elif not (
                line.startswith(b":") or line.startswith(b"event:") or line.startswith(b"id:")
            ):
                result.problems.append(f"line that is not SSE: {line[:80]!r}")
            continue
        if data_lines:
            _take_event(b"\n".join(data_lines), result)
            data_lines = []
    if data_lines:
        result.problems.append("the stream ended in the middle of an event (no blank line)")
        _take_event(b"\n".join(data_lines), result)
    if not result.done:
        result.problems.append("the stream did not end with 'data: [DONE]'")


def _take_event(data: bytes, result: Stream) -> None:
    if result.done:
        result.problems.append(f"an event after [DONE]: {data[:80]!r}")
        return
    if data == b"[DONE]":
        result.done = True
        return
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        result.problems.append(f"an event that is not JSON: {data[:80]!r}")
        return
    if not isinstance(chunk, dict):
        result.problems.append(f"an event that is not a JSON object: {data[:80]!r}")
        return
    if "error" in chunk:
        result.problems.append(f"an error event: {orjson.dumps(chunk['error']).decode()[:200]}")
        return
    result.chunks.append(chunk)
    result.chunk_times.append(time.monotonic() - result.sent_at)
