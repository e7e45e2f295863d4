"""One request to one endpoint, on a fresh connection, read to the end (``shakedown.httpclient``).

A fresh connection per request keeps the comparison about responses, not connection reuse:
Dynamo 1.6.1 doesn't set TCP_NODELAY on accepted sockets, so streams on a reused
connection stall ~40 ms, which would only add noise here.
"""

from __future__ import annotations

from dataclasses import dataclass

from shakedown import httpclient
from shakedown._core import ShakedownError
from shakedown.httpclient import Response, Url, parse_url

from .cases import Request

__all__ = ["Endpoint", "FetchError", "Response", "fetch", "parse_endpoint"]

TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests: host, port and the path prefix before `/v1/...`."""

    url: str
    host: str
    port: int
    prefix: str
    api_key: str | None = None


class FetchError(ShakedownError, RuntimeError):
    """The endpoint could not be reached or broke off the response."""


def parse_endpoint(url: str, api_key: str | None = None) -> Endpoint:
    """`http://HOST:PORT[/prefix]`; a trailing `/v1` (OPENAI_BASE_URL style) is dropped."""
    parsed = parse_url(url)
    if parsed.scheme != "http":
        raise ValueError(f"{url!r}: expected http://HOST:PORT")
    prefix = parsed.path.partition("?")[0].rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    return Endpoint(url, parsed.host, parsed.port, prefix, api_key)


def fetch(endpoint: Endpoint, request: Request, timeout: float = TIMEOUT_S) -> Response:
    """Send ``request`` and read its whole response within ``timeout`` seconds."""
    headers = dict(request.headers)
    if endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    if request.body is not None:
        headers["content-length"] = str(len(request.body))
    url = Url("http", endpoint.host, endpoint.port, endpoint.prefix + request.path)
    try:
        return httpclient.request(
            request.method, url, timeout_s=timeout, body=request.body, headers=headers
        )
    except OSError as err:
        raise FetchError(f"{endpoint.url}: {request.label}: {err!r}") from err
