"""The RSGI application: routes, and the relay between the pipeline and an engine.

Everything the client sees is bytes from the pipeline (`Exchange.feed/finish/fail`,
`models_body`, `error_body`); this module only moves them, decides status codes the
pipeline can't know (401/404/405/408/413/415/503), and keeps engines from hurting the host:
an engine exception becomes the reference's error, a client disconnect closes the
engine's generator, and `close()` ends open streams with an error event and [DONE].
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import orjson
from granian._granian import RSGIHeaders as Headers
from granian._granian import RSGIHTTPProtocol as HTTPProtocol
from granian._granian import RSGIHTTPStreamTransport as StreamTransport
from granian._granian import RSGIProtocolClosed as ProtocolClosed
from granian.rsgi import Scope

from shakedown._core import (
    CompletionBatch,
    Exchange,
    Pipeline,
    RequestError,
    error_body,
    is_json_content_type,
    model_not_ready,
    payload_too_large,
    route_not_found,
    unsupported_media_type,
)

from .context import RequestContext
from .frames import (
    ENGINE_ERRORS,
    as_engine_error,
    as_frame,
    close_items,
    log_failure,
    open_items,
)
from .inflight import Active, InFlight, absorb_cancel
from .registry import EngineItem, EngineRegistry, Registration

log = logging.getLogger("shakedown.endpoint")


JSON_HEADERS = [("content-type", "application/json")]
SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
UNAUTHORIZED_HEADERS = [*JSON_HEADERS, ("www-authenticate", "Bearer")]

# The reference hides engine error text from clients; the real error goes to the log.
ENGINE_ERROR = "Internal server error"
SHUTTING_DOWN = "Service is shutting down"
UNAUTHORIZED = "Invalid or missing bearer token"
BODY_TIMEOUT = "Request body not received within {seconds:g} s"
DONE = b"data: [DONE]\n\n"
EMPTY_MODELS = b'{"object":"list","data":[]}'
LIVE = b'{"status":"live","message":"Service is live"}'
NOT_LIVE = b'{"status":"shutting_down","message":"Service is shutting down"}'

BODY_READ_TIMEOUT_S = 30.0
"""A request body must arrive whole within this (408 otherwise); loopback clients need far less."""

_CHAT, _COMPLETIONS, _MODELS, _HEALTH, _LIVE = range(5)
_ROUTES: dict[str, tuple[str, int]] = {
    "/v1/chat/completions": ("POST", _CHAT),
    "/v1/completions": ("POST", _COMPLETIONS),
    "/v1/models": ("GET", _MODELS),
    "/health": ("GET", _HEALTH),
    "/live": ("GET", _LIVE),
}


def body_limit_bytes() -> int:
    """The request body limit, from `DYN_HTTP_BODY_LIMIT_MB` like the reference (45 MB)."""
    raw = os.environ.get("DYN_HTTP_BODY_LIMIT_MB", "").strip()
    megabytes = int(raw) if raw.isdigit() else 45
    return megabytes * 1024 * 1024


def given_request_id(given: str | None) -> str | None:
    """The deprecated `x-dynamo-request-id` when it is a UUID; else None, and the pipeline
    makes a fresh UUID v4."""
    if given:
        try:
            return str(uuid.UUID(given))
        except ValueError:
            pass
    return None


def engine_failure(err: BaseException) -> tuple[str, int]:
    """What the client is told about an engine exception: its own message and status when
    it carries a 4xx `status` (or `code`) — the request was at fault, as Dynamo reports an
    `InvalidArgument` — else the reference's generic 500."""
    for name in ("status", "code"):
        status = getattr(err, name, None)
        if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 500:
            return str(err), status
    return ENGINE_ERROR, 500


def engine_failed(raised: BaseException, what: str, *args: object) -> tuple[str, int]:
    """What the client is told about what an engine raised (`engine_failure`); a server
    error is logged, with `what` (a format, with `args`) naming the request."""
    err = as_engine_error(raised)
    message, status = engine_failure(err)
    if status >= 500:
        log_failure("engine failed on " + what, *args, error=err)
    return message, status


def log_failed_frame(request_id: str, frame: bytes) -> None:
    """An engine frame failed its request: an error event, `finish_reason: error`, or a frame
    the pipeline can't read. The client only gets the reference's generic error."""
    shown = frame if len(frame) <= 500 else frame[:500] + b"..."
    log.warning("engine frame failed request %s: %s", request_id, shown.decode(errors="replace"))


class EndpointApp:
    """RSGI app serving one model's pipeline, with the engine looked up per request."""

    def __init__(
        self,
        pipeline: Pipeline,
        registry: EngineRegistry,
        endpoint: str,
        *,
        api_key: str | None = None,
        body_read_timeout: float = BODY_READ_TIMEOUT_S,
    ) -> None:
        """`api_key`, when set, is the bearer token every request must carry (401 otherwise):
        the validation gates get it, other local processes don't."""
        self.pipeline = pipeline
        self.registry = registry
        self.endpoint = endpoint
        self._bearer = None if api_key is None else f"Bearer {api_key}".encode()
        self._unauthorized = error_body(401, UNAUTHORIZED)
        self.body_limit = body_limit_bytes()
        self.body_read_timeout = body_read_timeout
        self._closing = False
        self._inflight = InFlight(body_read_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._not_ready = model_not_ready(pipeline.served_name).body

    @property
    def in_flight(self) -> int:
        return len(self._inflight.active)

    def close(self) -> None:
        """Refuse new requests and end the open ones. Call on the app's loop thread."""
        self._closing = True
        for active in list(self._inflight.active):
            active.stop()

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """granian starts serving the app on `loop`. Each request would otherwise ask asyncio
        for its loop and task, and each such question costs a getpid() system call."""
        self._loop = loop

    async def __rsgi__(self, scope: Scope, proto: HTTPProtocol) -> None:
        try:
            generating = self._route(scope, proto)
            if generating is not None:
                await generating
        except asyncio.CancelledError:
            raise
        except Exception:
            # Nothing a request does may escape into the host; answer 500 if we still can.
            log_failure("unexpected error serving %s %s", scope.method, scope.path)
            try:
                proto.response_bytes(500, JSON_HEADERS, error_body(500, ENGINE_ERROR))
            except Exception:
                log.debug("could not send the 500 response")

    def _route(self, scope: Scope, proto: HTTPProtocol) -> Coroutine[Any, Any, None] | None:
        """Answer `scope`'s request at once, or return the coroutine that generates its
        answer (routing itself never waits: no coroutine of its own)."""
        # Each `scope.headers` is a fresh copy of the request's header map: read it once.
        headers = scope.headers
        if self._bearer is not None:
            given = headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, self._bearer):
                proto.response_bytes(401, UNAUTHORIZED_HEADERS, self._unauthorized)
                return None
        path, method = scope.path, scope.method
        route = _ROUTES.get(path)
        if route is None:
            proto.response_bytes(404, JSON_HEADERS, route_not_found(method, path).body)
            return None
        allowed, kind = route
        if method != allowed and not (allowed == "GET" and method == "HEAD"):
            proto.response_empty(405, [("allow", allowed)])
            return None
        if kind in (_CHAT, _COMPLETIONS):
            return self._generate(scope, headers, proto, kind == _CHAT)
        if kind == _MODELS:
            registered = self.registry.get(self.endpoint) is not None
            body = self.pipeline.models_body() if registered else EMPTY_MODELS
            proto.response_bytes(200, JSON_HEADERS, body)
        elif kind == _HEALTH:
            status, body = self._health()
            proto.response_bytes(status, JSON_HEADERS, body)
        else:
            status = 503 if self._closing else 200
            proto.response_bytes(status, JSON_HEADERS, NOT_LIVE if self._closing else LIVE)
        return None

    def _health(self) -> tuple[int, bytes]:
        if self._closing:
            return 503, orjson.dumps(
                {"status": "shutting_down", "message": SHUTTING_DOWN, "endpoints": []}
            )
        names = [self.endpoint] if self.registry.get(self.endpoint) is not None else []
        instances = []
        for name in names:
            parts = name.split(".")
            if len(parts) == 3:
                namespace, component, endpoint = parts
                instances.append(
                    {"component": component, "endpoint": endpoint, "namespace": namespace}
                )
        endpoints = [f"dyn://{name}" for name in names]
        return 200, orjson.dumps(
            {"status": "healthy", "endpoints": endpoints, "instances": instances}
        )

    async def _read_chunks(self, proto: HTTPProtocol) -> bytes | None:
        """The whole body of unknown length, or None when it goes over the limit."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in proto:
            size += len(chunk)
            if size > self.body_limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def _generate(
        self, scope: Scope, headers: Headers, proto: HTTPProtocol, chat: bool
    ) -> None:
        if self._closing:
            proto.response_bytes(503, JSON_HEADERS, error_body(503, SHUTTING_DOWN))
            return
        if not is_json_content_type(headers.get("content-type")):
            proto.response_bytes(415, JSON_HEADERS, unsupported_media_type().body)
            return
        loop = self._loop
        if loop is None:  # not served by granian, which calls `__rsgi_init__`
            loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:  # granian's asyncio task implementation always gives one
            raise RuntimeError("the endpoint must run handlers as asyncio tasks")
        inflight = self._inflight
        inflight.reading(task, loop)
        try:
            declared = headers.get("content-length")
            if declared is None or not declared.isdigit():
                body = await self._read_chunks(proto)
            elif int(declared) <= self.body_limit:
                body = await proto()
            else:
                body = None  # over the limit
        except asyncio.CancelledError:
            if not inflight.timed_out(task):
                raise
            message = BODY_TIMEOUT.format(seconds=self.body_read_timeout)
            # The rest of the body is never read: the connection can't carry another request.
            closing = [*JSON_HEADERS, ("connection", "close")]
            proto.response_bytes(408, closing, error_body(408, message))
            return
        except ProtocolClosed:
            log.info("the client left while sending the body of %s %s", scope.method, scope.path)
            return
        finally:
            inflight.read(task)
        if body is None:
            too_large = payload_too_large(self.body_limit // (1024 * 1024))
            proto.response_bytes(413, JSON_HEADERS, too_large.body)
            return
        request_id = given_request_id(headers.get("x-dynamo-request-id"))
        echoed = headers.get("x-request-id")
        reply_headers = (
            JSON_HEADERS if echoed is None else [*JSON_HEADERS, ("x-request-id", echoed)]
        )
        exchange: Exchange | CompletionBatch
        try:
            if chat:
                exchange = self.pipeline.chat(body, request_id)
            else:
                exchange = self.pipeline.completions(body, request_id)
        except RequestError as err:
            proto.response_bytes(err.status, reply_headers, err.body)
            return
        registration = self.registry.get(self.endpoint)
        if registration is None:
            proto.response_bytes(503, reply_headers, self._not_ready)
            return
        if isinstance(exchange, CompletionBatch):
            await self._fan_out(proto, exchange, registration, reply_headers, echoed, task, loop)
            return
        active = Active(task, RequestContext(exchange.request_id), proto)
        inflight.add(active, loop)
        try:
            request = orjson.loads(exchange.engine_request)
            if exchange.stream:
                sse_headers = SSE_HEADERS if echoed is None else [*SSE_HEADERS, reply_headers[-1]]
                await self._stream(
                    proto, sse_headers, exchange, registration, request, active, loop
                )
            else:
                status, body = await self._unary(exchange, registration, request, active, loop)
                if status:
                    proto.response_bytes(status, reply_headers, body)
        finally:
            inflight.discard(active)

    async def _unary(
        self,
        exchange: Exchange,
        registration: Registration,
        request: dict[str, Any],
        active: Active,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[int, bytes]:
        """The status and body to answer with; status 0 when the client has gone."""
        body = b""
        items = None
        try:
            try:
                items = open_items(registration, request, active.context, loop)
                async for item in items:
                    frame = as_frame(item)
                    # Unary: only a frame that fails the request writes (its error body).
                    body += exchange.feed(frame)
                    if active.interrupted:
                        raise asyncio.CancelledError
                    if exchange.finished:  # a stop string, the length limit, an error
                        if exchange.status != 200:
                            log_failed_frame(active.context.id, frame)
                        active.context.stop_generating()
                        break
            finally:
                await close_items(items)
            body += exchange.finish()
            return exchange.status, body
        except asyncio.CancelledError:
            if not active.interrupted:
                raise
            absorb_cancel(active.task)
            if active.disconnected:
                return 0, b""
            return 503, error_body(503, SHUTTING_DOWN)
        except ENGINE_ERRORS as raised:
            message, status = engine_failed(raised, "request %s", active.context.id)
            body = exchange.fail(message, status)
            return exchange.status, body

    async def _stream(
        self,
        proto: HTTPProtocol,
        sse_headers: list[tuple[str, str]],
        exchange: Exchange,
        registration: Registration,
        request: dict[str, Any],
        active: Active,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """The SSE response. It starts with its first bytes: a reply whose first engine item
        finishes it (a batch) goes out as head, events and end in one go, which granian
        writes at once instead of waking for each."""
        transport: StreamTransport | None = None  # held here only: see the finally
        ended = False
        last = b""  # the frames that finished the response go out with its closing ones
        items = None
        try:
            try:
                items = open_items(registration, request, active.context, loop)
                async for item in items:
                    frame = as_frame(item)
                    out = exchange.feed(frame)
                    if exchange.finished and not active.interrupted:
                        # Only a failure ends the stream from a frame ([DONE] after its error).
                        if out.endswith(DONE):
                            log_failed_frame(active.context.id, frame)
                        active.context.stop_generating()
                        last = out
                        break
                    if out:
                        if transport is None:
                            transport = proto.response_stream(200, sse_headers)
                        await transport.send_bytes(out)
                    if active.interrupted:
                        raise asyncio.CancelledError
            finally:
                await close_items(items)
            last += exchange.finish()
            ended = True
            if transport is None:
                transport = proto.response_stream(200, sse_headers)
            await transport.send_bytes(last)
        except ProtocolClosed:
            active.context.stop_generating()
        except asyncio.CancelledError:
            if not active.interrupted:
                raise
            absorb_cancel(active.task)
            if active.stopping and not active.disconnected and not ended:
                last += exchange.fail(SHUTTING_DOWN)
                await self._send_last(transport or proto.response_stream(200, sse_headers), last)
        except ENGINE_ERRORS as raised:
            message, status = engine_failed(raised, "streaming request %s", active.context.id)
            if not ended:
                last += exchange.fail(message, status)
                await self._send_last(transport or proto.response_stream(200, sse_headers), last)
        finally:
            # granian ends the response when the transport is freed. Drop it now, so a
            # traceback that outlives this frame (a reference cycle, a log record) can't
            # hold the client's stream open.
            del transport

    async def _fan_out(
        self,
        proto: HTTPProtocol,
        batch: CompletionBatch,
        registration: Registration,
        headers: list[tuple[str, str]],
        echoed: str | None,
        task: asyncio.Task[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Several prompts: one engine stream per prompt, run together, their frames merged
        by the batch as they arrive (one body, or one stream with one [DONE])."""
        active = Active(task, RequestContext(batch.request_id), proto)
        self._inflight.add(active, loop)
        transport: StreamTransport | None = None
        try:
            if batch.stream:
                sse_headers = SSE_HEADERS if echoed is None else [*SSE_HEADERS, headers[-1]]
                transport = proto.response_stream(200, sse_headers)
            body = await self._merge(batch, registration, active, transport, loop)
            if transport is not None:
                with contextlib.suppress(ProtocolClosed):
                    await transport.send_bytes(body)
            elif body:
                proto.response_bytes(batch.status, headers, body)
        except ProtocolClosed:
            active.context.stop_generating()
        finally:
            self._inflight.discard(active)
            del transport  # see `_stream`: the freed transport ends the response

    async def _merge(
        self,
        batch: CompletionBatch,
        registration: Registration,
        active: Active,
        transport: StreamTransport | None,
        loop: asyncio.AbstractEventLoop,
    ) -> bytes:
        """Run every prompt's engine stream; stream out what the batch gives (when
        `transport`), and return what is left to send: the closing bytes, the unary body,
        or the error; b"" when the client has gone."""
        contexts = [RequestContext(part_id) for part_id in batch.request_ids]
        arrived: asyncio.Queue[tuple[int, bytes | BaseException | None]] = asyncio.Queue()

        async def pump(part: int) -> None:
            request = orjson.loads(batch.engine_requests[part])
            items: AsyncIterator[EngineItem] | None = None
            try:
                items = open_items(registration, request, contexts[part], loop)
                async for item in items:
                    arrived.put_nowait((part, as_frame(item)))
                arrived.put_nowait((part, None))
            except ENGINE_ERRORS as err:
                arrived.put_nowait((part, as_engine_error(err)))
            finally:
                await close_items(items)

        pumps = [asyncio.ensure_future(pump(part)) for part in range(len(contexts))]
        running = set(range(len(pumps)))
        pending = b""
        try:
            while running:
                part, item = await arrived.get()
                if part not in running:
                    continue
                if isinstance(item, BaseException):
                    message, status = engine_failure(item)
                    if status >= 500:
                        log.error("engine failed on request %s: %r", contexts[part].id, item)
                    del item
                    return pending + batch.fail(message, status)
                if item is None:
                    running.discard(part)
                    out = batch.finish_part(part)
                else:
                    out = batch.feed(part, item)
                    if batch.closed:  # a frame failed the request: that is the answer
                        log_failed_frame(contexts[part].id, item)
                        return pending + out
                    if batch.part_finished(part):  # a stop string, the length limit
                        contexts[part].stop_generating()
                        pumps[part].cancel()
                        running.discard(part)
                        out += batch.finish_part(part)
                if transport is None:
                    pending += out
                elif out:
                    await transport.send_bytes(out)
                if active.interrupted:
                    raise asyncio.CancelledError
            return pending + batch.finish()
        except asyncio.CancelledError:
            if not active.interrupted:
                raise
            absorb_cancel(active.task)
            if active.disconnected:
                return b""
            return pending + batch.fail(SHUTTING_DOWN, 503)
        finally:
            # Every prompt's engine stops with the request, however it ended.
            for context in contexts:
                context.stop_generating()
            for pumping in pumps:
                pumping.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    @staticmethod
    async def _send_last(transport: StreamTransport, data: bytes) -> None:
        with contextlib.suppress(ProtocolClosed):
            await transport.send_bytes(data)
