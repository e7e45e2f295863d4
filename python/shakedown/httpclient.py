"""A small HTTP/1.1 client on the standard library, for the check runner, parity and URL gates.

One deadline bounds each whole exchange (connect, TLS handshake, request, status line, headers
and body): a per-read socket timeout would let a server that trickles a byte at a time hold the
caller for as long as it likes. A response is whole or an error: a body cut short raises
:class:`IncompleteResponse`. An optional ``cancel`` event ends any wait within
:data:`CANCEL_POLL_S`.
"""

from __future__ import annotations

import errno
import http.client
import ipaddress
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import orjson

from shakedown._core import ShakedownError

CANCEL_POLL_S = 0.05


class HttpError(ShakedownError, OSError):
    """The exchange failed: the answer was malformed, cut short or too large, or cancelled."""


class IncompleteResponse(HttpError):
    """The connection ended before the whole response arrived."""


class Cancelled(HttpError):
    """The caller's ``cancel`` event was set during the exchange."""


@dataclass(frozen=True)
class Url:
    """An http(s) URL split for sending: ``path`` is the request target (path and query)."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def is_loopback(self) -> bool:
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def at(self, path: str) -> Url:
        """This URL's origin with ``path`` appended to its path (a base URL's prefix kept)."""
        return replace(self, path=self.path.rstrip("/") + path)


def parse_url(url: str) -> Url:
    """Split an ``http://`` or ``https://`` URL; ``ValueError`` says what is wrong with it."""
    if "\0" in url:
        raise ValueError(f"{url!r} contains a NUL byte")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise ValueError(f"{url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http(s) URL")
    netloc = parts.netloc.rpartition("@")[2]
    if netloc.count(":") > 1 and not netloc.startswith("["):
        raise ValueError(f"{url!r}: an IPv6 address must be in brackets, as in http://[::1]:8000/")
    try:
        host = parts.hostname
        port = parts.port
    except ValueError as exc:  # urllib's own words: "Port out of range 0-65535", ...
        raise ValueError(f"{url!r} has a bad port: {exc}") from None
    if not host:
        raise ValueError(f"{url!r} has no host")
    if port == 0:
        raise ValueError(f"{url!r} has a bad port: 0")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Url(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self) -> Any:
        return orjson.loads(self.body)

    def snippet(self, limit: int = 300) -> str:
        text = self.body.decode("utf-8", errors="replace")
        return text if len(text) <= limit else text[:limit] + "..."


class Incoming:
    """A response whose status line and headers have arrived; the body is read through it."""

    def __init__(self, response: http.client.HTTPResponse) -> None:
        if response.msg.defects:  # a header line without a colon, ...
            raise HttpError(f"malformed response headers: {response.msg.defects}")
        self._response = response
        self.status = response.status
        self.headers: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            self.headers[key] = f"{self.headers[key]}, {value}" if key in self.headers else value

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def framed(self) -> bool:
        """Whether the body's end is marked (Content-Length or chunked), so that a response
        cut short, even in its headers, can be told from a whole one."""
        return self._response.length is not None or bool(self._response.chunked)

    def readline(self) -> bytes:
        """The next line with its ending; ``b""`` once the body is whole."""
        with _malformed_as_http_error():
            line = self._response.readline()
        if not line:
            self._check_whole()
        return line

    def read(self, limit: int | None = None) -> bytes:
        """The rest of the body; :class:`HttpError` if it is longer than ``limit`` bytes."""
        chunks: list[bytes] = []
        size = 0
        with _malformed_as_http_error():
            while chunk := self._response.read(65536):
                size += len(chunk)
                if limit is not None and size > limit:
                    raise HttpError(f"the response body is over {limit} bytes")
                chunks.append(chunk)
        self._check_whole()
        return b"".join(chunks)

    def _check_whole(self) -> None:
        # http.client reports a short chunked body itself, but a short Content-Length body only
        # as the bytes still owed.
        if self._response.length:
            raise IncompleteResponse(
                f"the connection closed {self._response.length} byte(s) before the end of the body"
            )


@contextmanager
def _malformed_as_http_error() -> Iterator[None]:
    try:
        yield
    except http.client.IncompleteRead as exc:
        raise IncompleteResponse(f"the response was cut short: {exc!r}") from exc
    except http.client.HTTPException as exc:
        if isinstance(exc, OSError):  # RemoteDisconnected is a ConnectionResetError too
            raise
        raise HttpError(f"malformed response: {exc!r}") from exc


@contextmanager
def exchange(
    method: str,
    url: Url,
    *,
    timeout_s: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[Incoming]:
    """Send one request on a fresh connection and yield the response once its headers are in.

    Everything, reading the body through the yielded :class:`Incoming` included, must end
    within ``timeout_s`` of the call, or ``TimeoutError`` is raised. A refused connection
    raises ``ConnectionRefusedError``; other failures are ``OSError`` s.
    """
    conn = _Connection(url, _Clock(timeout_s, cancel))
    try:
        with _malformed_as_http_error():
            conn.request(method, url.path, body=body, headers=dict(headers or {}))
            response = conn.getresponse()
        yield Incoming(response)
    finally:
        conn.close()


def request(
    method: str,
    url: Url,
    *,
    timeout_s: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    max_body: int | None = None,
    framed: bool = False,
) -> Response:
    """One whole exchange: :func:`exchange`, with the body read to its end.

    ``framed``: refuse a response that ends only by closing the connection, the one kind a
    server that dies mid-answer (even right after the status line) can make look whole.
    """
    with exchange(
        method, url, timeout_s=timeout_s, body=body, headers=headers, cancel=cancel
    ) as incoming:
        if framed and not incoming.framed:
            raise IncompleteResponse(
                "the response has neither Content-Length nor chunked framing, so it cannot "
                "be told whole"
            )
        data = incoming.read(max_body)
    return Response(incoming.status, incoming.headers, data)


class _Clock:
    def __init__(self, timeout_s: float, cancel: threading.Event | None) -> None:
        self.timeout_s = timeout_s
        self.end = time.monotonic() + timeout_s
        self.cancel = cancel

    def slice(self) -> float:
        """How long the next blocking wait may last; raises once out of time or cancelled."""
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("the exchange was cancelled")
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete response within {self.timeout_s:g}s")
        return remaining if self.cancel is None else min(remaining, CANCEL_POLL_S)


class _BoundedSocket(socket.socket):
    """A socket whose every receive and send waits only as long as the exchange's clock allows.

    ``makefile`` (which http.client reads through) calls ``recv_into``, so the bound covers
    the status line, the headers and the body alike.
    """

    clock: _Clock

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        # Only what the caller gave is passed on: plain and TLS sockets default nbytes apart.
        args = () if nbytes is None else (nbytes, flags)
        while True:
            self.settimeout(self.clock.slice())
            try:
                return super().recv_into(buffer, *args)
            except TimeoutError:
                continue  # the slice ended: look at the deadline and cancel again

    def sendall(self, data: Any, flags: int = 0) -> None:
        with memoryview(data) as whole:
            view = whole.cast("B")
            while view:
                self.settimeout(self.clock.slice())
                try:
                    sent = super().send(view, flags)
                except TimeoutError:
                    continue
                view = view[sent:]


class _BoundedTlsSocket(_BoundedSocket, ssl.SSLSocket):
    pass


def _connect(url: Url, clock: _Clock) -> socket.socket:
    last_error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(
        url.host, url.port, type=socket.SOCK_STREAM
    ):
        sock = _BoundedSocket(family, kind, proto)
        sock.clock = clock
        try:
            sock.setblocking(False)
            err = sock.connect_ex(address)
            if err and err not in _IN_PROGRESS:
                raise OSError(err, f"connecting to {url.host}:{url.port}: {os.strerror(err)}")
            with selectors.DefaultSelector() as selector:
                selector.register(sock, selectors.EVENT_WRITE)
                while not selector.select(clock.slice()):
                    pass
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, f"connecting to {url.host}:{url.port}: {os.strerror(err)}")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock if url.scheme == "http" else _start_tls(sock, url.host, clock)
        except (TimeoutError, Cancelled):
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last_error = exc
    raise last_error or OSError(f"{url.host!r} resolves to no address")


_IN_PROGRESS = frozenset({errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK})


def _start_tls(sock: socket.socket, host: str, clock: _Clock) -> socket.socket:
    context = ssl.create_default_context()
    context.sslsocket_class = _BoundedTlsSocket
    tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
    assert isinstance(tls, _BoundedTlsSocket)
    tls.clock = clock
    while True:
        tls.settimeout(clock.slice())
        try:
            tls.do_handshake()
            return tls
        except TimeoutError:
            continue


class _Connection(http.client.HTTPConnection):
    """http.client's framing over a :class:`_BoundedSocket` connected within the deadline."""

    def __init__(self, url: Url, clock: _Clock) -> None:
        super().__init__(url.host, url.port)
        self._url = url
        self._clock = clock

    def connect(self) -> None:
        self.sock = _connect(self._url, self._clock)
