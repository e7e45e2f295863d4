"""NVIDIA Dynamo integration (extra `dynamo`: ai-dynamo-runtime 1.6.1).

`DynamoEngine` is a loopback engine that forwards each engine request (the
PreprocessedRequest dict) to a Dynamo endpoint over the request plane and yields the
worker's LLMEngineOutput dicts, so the loopback can drive any Dynamo worker: the mocker,
vLLM, SGLang, TensorRT-LLM, or a Python worker in this very process.

`HeldRegistration` stands in for `register_model` / `register_llm` in a Dynamo Python
worker: it records the registration and publishes it only when `release()` runs, which
worker validation calls as a release hook, so the frontend never routes to a worker whose
checks have not passed. `shakedown run` (`shakedown.integrations.dynamo_run`) puts it in
front of an unmodified worker's own `register_model` calls.

`dynamo` is imported on first use, so importing this module needs only shakedown.
With `shakedown serve --engine shakedown.integrations.dynamo:engine` the endpoint and the
connection come from the environment: SHAKEDOWN_DYNAMO_ENDPOINT (default
`dynamo.backend.generate`), DYN_DISCOVERY_BACKEND (default `etcd`, as Dynamo's own
workers) and DYN_REQUEST_PLANE (default `tcp`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shakedown._core import ShakedownError
from shakedown.endpoint.context import EngineContext

log = logging.getLogger("shakedown.integrations.dynamo")

DEFAULT_ENDPOINT = "dynamo.backend.generate"
ENDPOINT_ENV = "SHAKEDOWN_DYNAMO_ENDPOINT"
WAIT_TIMEOUT_S = 30.0


class DynamoEngineError(ShakedownError, RuntimeError):
    """The Dynamo worker refused or failed a request.

    `status` is 400 when Dynamo said the request was invalid (`InvalidArgument`, e.g. the
    mocker's "max_tokens is required"), else 500; `kind` is Dynamo's exception class name.
    """

    def __init__(self, message: str, *, status: int, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def dynamo_core() -> Any:
    """`dynamo._core` (only the compiled module: it needs none of ai-dynamo's Python deps)."""
    try:
        return importlib.import_module("dynamo._core")
    except ImportError as err:
        raise ImportError(
            "shakedown.integrations.dynamo needs ai-dynamo-runtime==1.6.1 "
            "(pip install 'llm-shakedown[dynamo]')"
        ) from err


def _translate(err: BaseException) -> DynamoEngineError:
    kind = type(err).__name__
    status = 400 if kind == "InvalidArgument" else 500
    return DynamoEngineError(str(err), status=status, kind=kind)


class DynamoEngine:
    """Forward engine requests to a Dynamo endpoint (`namespace.component.endpoint`).

    Give a `client` (from `await runtime.endpoint(path).client()`), a `dynamo_endpoint` (a
    Dynamo `Endpoint` object: its client is made on the first request's loop) or a `runtime`
    to use them; otherwise the engine makes its own `DistributedRuntime` on the event loop of
    its first request, from `discovery_backend` / `request_plane` (default:
    DYN_DISCOVERY_BACKEND, DYN_REQUEST_PLANE). The first request waits up to
    `wait_timeout_s` for an instance.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        runtime: Any = None,
        client: Any = None,
        dynamo_endpoint: Any = None,
        discovery_backend: str | None = None,
        request_plane: str | None = None,
        wait_timeout_s: float = WAIT_TIMEOUT_S,
    ) -> None:
        self.endpoint = endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        if self.endpoint.count(".") != 2:
            raise ValueError(
                f"Dynamo endpoint must be namespace.component.endpoint, got {self.endpoint!r}"
            )
        self.discovery_backend = discovery_backend
        self.request_plane = request_plane
        self.wait_timeout_s = wait_timeout_s
        self._runtime = runtime
        self._own_runtime = False
        self._client = client
        self._dynamo_endpoint = dynamo_endpoint
        self._lock: asyncio.Lock | None = None
        self.in_flight_ids: set[str] = set()
        """The Dynamo request ids (context ids) of this engine's requests in flight: the
        worker's handler sees the same ids, and tells the loopback's requests from users'."""

    async def client(self) -> Any:
        """The endpoint client, made on first use; waits for at least one instance."""
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                self._client = await self._connect()
        return self._client

    async def _connect(self) -> Any:
        if self._dynamo_endpoint is not None:
            client = await self._dynamo_endpoint.client()
        else:
            if self._runtime is None:
                discovery = self.discovery_backend or os.environ.get(
                    "DYN_DISCOVERY_BACKEND", "etcd"
                )
                plane = self.request_plane or os.environ.get("DYN_REQUEST_PLANE", "tcp")
                self._runtime = dynamo_core().DistributedRuntime(
                    asyncio.get_running_loop(), discovery, plane
                )
                self._own_runtime = True
            client = await self._runtime.endpoint(self.endpoint).client()
        try:
            instances = await asyncio.wait_for(client.wait_for_instances(), self.wait_timeout_s)
        except asyncio.TimeoutError:
            raise DynamoEngineError(
                f"no instance of {self.endpoint} appeared within {self.wait_timeout_s:g}s",
                status=503,
                kind="Timeout",
            ) from None
        if self._dynamo_endpoint is not None:
            # A Dynamo Endpoint object does not expose its path; its instances do.
            first = client.instances()[0]
            self.endpoint = f"{first.namespace}.{first.component}.{first.endpoint}"
        log.info("dynamo engine: %s has %d instance(s)", self.endpoint, len(instances))
        return client

    async def generate(
        self, request: dict[str, Any], context: EngineContext | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the worker's output dicts; a stopped `context` stops the Dynamo request too."""
        core = dynamo_core()
        client = await self.client()
        dyn_context = core.Context()
        request_id = dyn_context.id()
        self.in_flight_ids.add(request_id)
        finished = False
        try:
            try:
                stream = await client.generate(request, annotated=False, context=dyn_context)
            except core.DynamoException as err:
                raise _translate(err) from err
            async for item in stream:
                if context is not None and context.is_stopped():
                    break
                yield item
            else:
                finished = True
        except core.DynamoException as err:
            raise _translate(err) from err
        finally:
            self.in_flight_ids.discard(request_id)
            # Early exit (client gone, stop string hit, generator closed): free the worker.
            if not finished:
                dyn_context.stop_generating()

    __call__ = generate

    def shutdown(self) -> None:
        """Shut down the runtime if this engine made it."""
        if self._own_runtime and self._runtime is not None:
            self._runtime.shutdown()
            self._runtime = None
            self._client = None


@dataclass(frozen=True)
class Registration:
    """What a held `register_model` call says about the model, in shakedown's card terms."""

    model_path: str
    model_name: str | None
    endpoint: Any
    model_input: str  # "tokens", "text", "tensor"
    model_type: frozenset[str]  # Dynamo's surface names: "chat", "completions", ...
    worker_type: str  # "aggregated", "prefill", "decode", "encode"
    lora_name: str | None
    tool_call_parser: str | None
    reasoning_parser: str | None
    custom_template_path: str | None = None

    def card(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        model_dir: str | None = None,
        served_name: str | None = None,
    ) -> Any:
        """A `shakedown.endpoint.ModelCard` for worker validation's `attach(card, engine)`.

        `endpoint` is the registration's `namespace.component.endpoint` (a Dynamo `Endpoint`
        object does not expose its path); `model_dir` replaces `model_path` when that is not
        a local directory (see `local_model_dir`), `served_name` the registered name.
        """
        cards = importlib.import_module("shakedown.endpoint")
        return cards.ModelCard(
            model_dir=model_dir or self.model_path,
            served_name=served_name or self.model_name,
            model_input=self.model_input,
            model_type=self.model_type,
            worker_type=self.worker_type,
            lora=self.lora_name,
            endpoint=endpoint,
            reasoning_parser=self.reasoning_parser,
            tool_call_parser=self.tool_call_parser,
        )


RegisterFn = Callable[..., Awaitable[Any]]


class HeldRegistration:
    """A `register_model` / `register_llm` stand-in that publishes only on `release()`.

    In the worker::

        held = HeldRegistration()
        await held.register_model(ModelInput.Tokens, ModelType.Chat, endpoint, model_path,
                                  name, runtime_config=rc, ...)     # recorded, not published
        held.attach(validation)          # validation.add_release_hook(held.release)
        ... validation releases -> the real register_model runs with the same arguments

    Calls made after release go straight through. `register` defaults to
    `dynamo._core.register_model` (which `dynamo.llm.register_llm` is).
    """

    def __init__(self, register: RegisterFn | None = None, *, held: bool = True) -> None:
        self._register = register
        self._calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._published: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        # held=False: calls go through at once, recorded so that `unpublish` can undo them.
        self._released = not held

    @property
    def released(self) -> bool:
        return self._released

    @property
    def pending(self) -> int:
        """How many registrations are held."""
        return len(self._calls)

    def _real(self) -> RegisterFn:
        if self._register is None:
            register: RegisterFn = dynamo_core().register_model
            self._register = register
        return self._register

    async def register_model(self, *args: Any, **kwargs: Any) -> None:
        if self._released:
            await self._real()(*args, **kwargs)
            self._published.append((args, kwargs))
            return
        self._calls.append((args, kwargs))
        log.info("dynamo registration held until validation releases the worker")

    register_llm = register_model

    def withdraw(self, endpoint: Any, lora_name: str | None = None) -> bool:
        """Drop the held registrations of `endpoint` (and `lora_name`), as `unregister_model`
        would have removed them once published; True when one was held. A published one is
        forgotten too (the caller unregisters it for real), so `unpublish` leaves it alone."""

        def kept(call: tuple[tuple[Any, ...], dict[str, Any]]) -> bool:
            args, kwargs = call
            return not (
                registration_of(args, kwargs).endpoint is endpoint
                and kwargs.get("lora_name") == lora_name
            )

        self._published[:] = filter(kept, self._published)
        before = len(self._calls)
        self._calls[:] = filter(kept, self._calls)
        return len(self._calls) != before

    async def release(self) -> None:
        """Publish the held registrations, in the order they were made."""
        register = self._real()
        while self._calls:
            # Taken off the queue first: a `withdraw` while this one publishes must not
            # shift the queue under it.
            args, kwargs = self._calls.pop(0)
            try:
                await register(*args, **kwargs)
            except BaseException:
                self._calls.insert(0, (args, kwargs))
                raise
            self._published.append((args, kwargs))
        self._released = True
        log.info("dynamo registration published")

    async def unpublish(self, unregister: Callable[..., Awaitable[Any]] | None = None) -> None:
        """The counterpart of `release()`: unregister what it (and any later call) published,
        newest first, and hold the calls again, so a later `release()` publishes them anew.
        `unregister` defaults to `dynamo._core.unregister_model`."""
        unregister = unregister or dynamo_core().unregister_model
        self._released = False
        while self._published:
            args, kwargs = self._published.pop()
            registration = registration_of(args, kwargs)
            try:
                await unregister(registration.endpoint, lora_name=registration.lora_name)
            except BaseException:
                self._published.append((args, kwargs))
                raise
            self._calls.insert(0, (args, kwargs))
        log.info("dynamo registration unpublished")

    def attach(self, validation: Any) -> None:
        """Make `release()` one of `validation`'s release hooks (call it on the worker's loop)."""
        validation.add_release_hook(self.release, name="dynamo register_model")

    def registrations(self) -> list[Registration]:
        """The held calls, read with `register_model`'s parameter names."""
        return [registration_of(args, kwargs) for args, kwargs in self._calls]


def _enum_name(value: Any, default: str) -> str:
    """Dynamo's enum objects print as `ModelInput.Tokens` or `aggregated`: take the name."""
    return str(value).rsplit(".", 1)[-1].lower() if value is not None else default


def registration_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Registration:
    """A `register_model(*args, **kwargs)` call read with its parameter names."""
    names = ("model_input", "model_type", "endpoint", "model_path", "model_name")
    bound = dict(zip(names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    config = kwargs.get("runtime_config")
    model_type = bound.get("model_type")
    return Registration(
        model_path=str(bound.get("model_path")),
        model_name=bound.get("model_name"),
        endpoint=bound.get("endpoint"),
        model_input=_enum_name(bound.get("model_input"), "tokens"),
        # ModelType prints its surfaces comma-separated: "chat,completions".
        model_type=frozenset(str(model_type).split(",")) if model_type is not None else frozenset(),
        worker_type=_enum_name(kwargs.get("worker_type"), "aggregated"),
        lora_name=kwargs.get("lora_name"),
        tool_call_parser=getattr(config, "tool_call_parser", None),
        reasoning_parser=getattr(config, "reasoning_parser", None),
        custom_template_path=kwargs.get("custom_template_path"),
    )


async def local_model_dir(model_path: str) -> str:
    """A local directory for `register_model`'s `model_path`: itself when it is one, else
    Dynamo's own download cache (`fetch_model`, weights skipped), as the frontend resolves it."""
    if os.path.isdir(model_path):
        return model_path
    fetched = await dynamo_core().fetch_model(model_path, ignore_weights=True)
    return str(fetched)


def _engine_from_env() -> DynamoEngine:
    return DynamoEngine()


# `shakedown serve --engine shakedown.integrations.dynamo:engine`
engine = _engine_from_env()
