"""One request to one endpoint, on a fresh connection, read to the end (stdlib only).

A fresh connection per request keeps the comparison about responses, not connection reuse:
Dynamo 1.6.1 doesn't set TCP_NODELAY on accepted sockets, so streams on a reused
connection stall ~40 ms, which would only add noise here.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlsplit

from shakedown._core import ShakedownError

from .cases import Request

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests: host, port and the path prefix before `/v1/...`."""

    url: str
    host: str
    port: int
    prefix: str
    api_key: str | None = None


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes


class FetchError(ShakedownError, RuntimeError):
    """The endpoint could not be reached or broke off the response."""


def parse_endpoint(url: str, api_key: str | None = None) -> Endpoint:
    """`http://HOST:PORT[/prefix]`; a trailing `/v1` (OPENAI_BASE_URL style) is dropped."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url!r}: expected http://HOST:PORT")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    return Endpoint(url, parts.hostname, parts.port or 80, prefix, api_key)


def fetch(endpoint: Endpoint, request: Request, timeout: float = TIMEOUT_S) -> Response:
    conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout)
    headers = dict(request.headers)
    if endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    if request.body is not None:
        headers["content-length"] = str(len(request.body))
    try:
        conn.request(
            request.method, endpoint.prefix + request.path, body=request.body, headers=headers
        )
        resp = conn.getresponse()
        body = resp.read()
        merged: dict[str, str] = {}
        for name, value in resp.getheaders():
            key = name.lower()
            merged[key] = f"{merged[key]}, {value}" if key in merged else value
        return Response(resp.status, merged, body)
    except (OSError, http.client.HTTPException) as err:
        raise FetchError(f"{endpoint.url}: {request.label}: {err!r}") from err
    finally:
        conn.close()
