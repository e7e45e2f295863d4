"""Engine output, whichever loop the engine runs on.

`open_items` opens a request's stream of engine items. An item is one output dict or, when
several outputs are ready at once, a list of them (a batch: one serialization, one pipeline
call and one send for all of them), or either of those already serialized (JSON bytes);
`as_frame` makes any item the JSON bytes the pipeline's `Exchange.feed` takes. An engine on
the endpoint's loop is iterated directly (no generator of ours in between: a request's cost
is mostly such fixed costs); one on another loop runs there, its items serialized there.
`close_items`, or cancelling the task iterating the stream, closes the engine's generator,
on the engine's loop. Whoever iterates a stream treats `ENGINE_ERRORS` from it as the
engine's failure (`as_engine_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import sys
import traceback
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

import orjson

from .context import RequestContext
from .registry import EngineItem, Registration

log = logging.getLogger("shakedown.endpoint")


def log_failure(message: str, *args: object, error: BaseException | None = None) -> None:
    """Log `error` (default: the exception being handled) as text. granian ends a streamed
    response only when its transport object is freed, so a log record that kept the
    traceback (and with it the handler's locals) alive would hold the client's stream open."""
    if error is None:
        text = "".join(traceback.format_exception(*sys.exc_info()))
    else:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    log.error(message + "\n%s", *args, text.rstrip())


class EngineExit(RuntimeError):
    """The engine raised KeyboardInterrupt or SystemExit: its request fails, the host lives on.

    asyncio re-raises those two out of the event loop, which would stop the server (or the
    worker's loop) for every request; the engine's own exception is the `__cause__`."""


# What an engine may raise that still only fails its own request.
ENGINE_ERRORS = (Exception, KeyboardInterrupt, SystemExit)


def as_engine_error(err: BaseException) -> Exception:
    """The exception an engine raised, as one that fails only its request."""
    if isinstance(err, Exception):
        return err
    exit_error = EngineExit(f"the engine raised {type(err).__name__}")
    exit_error.__cause__ = err
    return exit_error


def as_frame(item: EngineItem) -> bytes:
    """An engine item as JSON bytes (serialized items pass as they are)."""
    return item if type(item) is bytes else orjson.dumps(item)


def _local_items(
    engine: Any, request: dict[str, Any], context: RequestContext
) -> AsyncIterator[EngineItem]:
    """The engine's stream: its own async iterator (no coroutine of ours in between), or
    for an `async def generate(...)` that returns an iterator rather than being one, a
    generator that awaits it first."""
    stream = engine(request, context)
    if hasattr(stream, "__anext__"):
        return stream  # type: ignore[no-any-return]
    if inspect.isawaitable(stream):
        return _awaited_items(stream)
    raise TypeError(f"engine returned {type(stream).__name__}, not an async iterator")


async def _awaited_items(awaitable: Awaitable[Any]) -> AsyncGenerator[EngineItem, None]:
    stream = await awaitable
    if not hasattr(stream, "__anext__"):
        raise TypeError(f"engine returned {type(stream).__name__}, not an async iterator")
    try:
        async for item in stream:
            yield item
    finally:
        await close_items(stream)


async def close_items(stream: AsyncIterator[EngineItem] | None) -> None:
    """Close an engine stream (`open_items`'); an engine's error while closing is logged."""
    if getattr(stream, "ag_frame", True) is None:
        return  # an async generator that has ended: nothing to close
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except ENGINE_ERRORS:
        log_failure("engine raised while its generator was being closed")


class _End:
    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


async def _remote_frames(
    engine: Any,
    loop: asyncio.AbstractEventLoop,
    request: dict[str, Any],
    context: RequestContext,
    here: asyncio.AbstractEventLoop,
) -> AsyncGenerator[bytes, None]:
    queue: asyncio.Queue[bytes | _End] = asyncio.Queue()

    def deliver(item: bytes | _End) -> None:
        with contextlib.suppress(RuntimeError):  # the endpoint's loop has closed
            here.call_soon_threadsafe(queue.put_nowait, item)

    async def pump() -> None:
        stream = None
        try:
            stream = _local_items(engine, request, context)
            async for item in stream:
                deliver(as_frame(item))
        except asyncio.CancelledError:
            context.stop_generating()
            raise
        except ENGINE_ERRORS as err:
            deliver(_End(as_engine_error(err)))
        else:
            deliver(_End(None))
        finally:
            await close_items(stream)

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


def open_items(
    registration: Registration,
    request: dict[str, Any],
    context: RequestContext,
    here: asyncio.AbstractEventLoop,
) -> AsyncIterator[EngineItem]:
    """The engine's stream of items for `request`, opened on the loop `here`: the engine's
    own generator when it runs on that loop, else a generator of its items serialized on
    its loop."""
    engine, loop = registration
    if loop is None or loop is here:
        return _local_items(engine, request, context)
    return _remote_frames(engine, loop, request, context, here)
