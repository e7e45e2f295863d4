"""Engine output as serialized frames, whichever loop the engine runs on.

`engine_frames` yields each item the engine produces as JSON bytes (what the
pipeline's `Exchange.feed` takes). An item is one output dict or, when several outputs
are ready at once, a list of them (a batch: one serialization, one pipeline call and one
send for all of them). Closing the returned generator, or cancelling
the task iterating it, closes the engine's own generator, on the engine's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import traceback
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from .context import RequestContext
from .registry import EngineItem, Registration

log = logging.getLogger("shakedown.endpoint")


def log_failure(message: str, *args: object) -> None:
    """Log the exception being handled as text. granian ends a streamed response only
    when its transport object is freed, so a log record that kept the traceback (and
    with it the handler's locals) alive would hold the client's stream open."""
    text = "".join(traceback.format_exception(*sys.exc_info()))
    log.error(message + "\n%s", *args, text.rstrip())


class EngineExit(RuntimeError):
    """The engine raised KeyboardInterrupt or SystemExit: its request fails, the host lives on.

    asyncio re-raises those two out of the event loop, which would stop the server (or the
    worker's loop) for every request; the engine's own exception is the `__cause__`."""


# What an engine may raise that still only fails its own request.
ENGINE_ERRORS = (Exception, KeyboardInterrupt, SystemExit)


def _as_engine_error(err: BaseException) -> Exception:
    if isinstance(err, Exception):
        return err
    exit_error = EngineExit(f"the engine raised {type(err).__name__}")
    exit_error.__cause__ = err
    return exit_error


async def _open(
    engine: Any, request: dict[str, Any], context: RequestContext
) -> AsyncIterator[EngineItem]:
    stream = engine(request, context)
    if inspect.isawaitable(stream):
        # `async def generate(...)` that returns an iterator rather than being one.
        stream = await stream
    if not hasattr(stream, "__anext__"):
        raise TypeError(f"engine returned {type(stream).__name__}, not an async iterator")
    return stream  # type: ignore[no-any-return]


async def _close(stream: AsyncIterator[EngineItem] | None) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except ENGINE_ERRORS:
        log_failure("engine raised while its generator was being closed")


async def _local_frames(
    engine: Any, request: dict[str, Any], context: RequestContext
) -> AsyncGenerator[bytes, None]:
    stream = None
    try:
        stream = await _open(engine, request, context)
        async for frame in stream:
            yield orjson.dumps(frame)
    except (KeyboardInterrupt, SystemExit) as err:
        raise _as_engine_error(err) from err
    finally:
        await _close(stream)


class _End:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def _remote_frames(
    engine: Any,
    loop: asyncio.AbstractEventLoop,
    request: dict[str, Any],
    context: RequestContext,
) -> AsyncGenerator[bytes, None]:
    here = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | _End] = asyncio.Queue()

    def deliver(item: bytes | _End) -> None:
        with contextlib.suppress(RuntimeError):  # the endpoint's loop has closed
            here.call_soon_threadsafe(queue.put_nowait, item)

    async def pump() -> None:
        stream = None
        try:
            stream = await _open(engine, request, context)
            async for frame in stream:
                deliver(orjson.dumps(frame))
        except asyncio.CancelledError:
            context.stop_generating()
            raise
        except ENGINE_ERRORS as err:
            deliver(_End(_as_engine_error(err)))
        else:
            deliver(_End(None))
        finally:
            await _close(stream)

    if loop.is_closed() or not loop.is_running():
        raise RuntimeError("the engine's event loop is not running")
    pumping = asyncio.run_coroutine_threadsafe(pump(), loop)
    try:
        while True:
            item = await queue.get()
            if isinstance(item, _End):
                error = item.error
                del item
                if error is None:
                    return
                try:
                    raise error
                finally:
                    # Else error -> traceback -> this frame -> error: a cycle that would
                    # keep the handler's frame, and so the client's stream, alive.
                    del error
            yield item
    finally:
        pumping.cancel()  # thread-safe; a no-op once the pump has finished


def engine_frames(
    registration: Registration, request: dict[str, Any], context: RequestContext
) -> AsyncGenerator[bytes, None]:
    engine, loop = registration
    if loop is None or loop is asyncio.get_running_loop():
        return _local_frames(engine, request, context)
    return _remote_frames(engine, loop, request, context)
