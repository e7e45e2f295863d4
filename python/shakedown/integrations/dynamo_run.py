"""`shakedown run -- python -m dynamo.<backend> ...`: validation gates for a stock Dynamo
Python worker, without changing its code.

The worker runs in this process (runpy) after `RegistrationHold.install()` has replaced
Dynamo 1.6.1's registration entry points, `register_model` / `register_llm` and
`unregister_model` / `unregister_llm`, on `dynamo._core` and on every loaded `dynamo.*`
module that re-exports them. The stock backends bind those names when they are imported
(`from dynamo.llm import register_model`), after the hold is in place, so they call it.

The first registration whose card may have a loopback (tokens in, a chat or completions
surface, not a LoRA, not prefill- or encode-only) claims it: its model directory, served
name, parsers and chat template make the card, and a `DynamoEngine` on its own `Endpoint`
object drives the worker over the request plane from the worker's runtime. Then:

- hold=card: every registration made before release is held, in order, and published on
  release; `unregister_model` of a held one drops it.
- hold=health: registrations pass through; the worker's Dynamo `/health` (DYN_SYSTEM_PORT)
  answers not ready until release (`ReadinessHold`).

With rechecks on (DYN_WORKER_VALIDATION_RECHECK_S), `Endpoint.serve_endpoint` is patched too:
every handler the worker serves counts its in-flight requests as the worker's activity (the
loopback's own requests, known by their Dynamo request id, excepted), and failed rechecks
unrelease the worker: its cards are unregistered again, and registered anew once rechecks
pass (under either hold: Dynamo 1.6.1 offers no way to make a served endpoint not ready again,
so under hold=health the worker's /health stays ready while its cards are out of discovery).

With no gates configured the command is exec'd as given: no patch, no listener.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import inspect
import json
import logging
import os
import re
import runpy
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn

from shakedown.endpoint import ineligibility
from shakedown.integrations.dynamo import (
    DynamoEngine,
    HeldRegistration,
    Registration,
    dynamo_core,
    local_model_dir,
    registration_of,
)
from shakedown.validation import Hold, ValidationConfigError, WorkerValidation
from shakedown.validation.activity import Activity
from shakedown.validation.health import HealthServer
from shakedown.validation.serve import add_gate_arguments, validation_from_args

log = logging.getLogger("shakedown.run")

# Exit status when the worker was not released; a released worker exits with its own.
EXIT_USAGE = 2
EXIT_HELD = 3
EXIT_CRASHED = 4

# hold=health: the endpoint this process serves on release, listed in the variable below so
# that Dynamo's system /health is not ready before it.
RELEASE_ENDPOINT = "shakedown_released"
ENDPOINT_HEALTH_VAR = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS"
# How long the loopback's first request waits for the worker to serve its endpoint.
ENGINE_WAIT_S = 600.0

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


@dataclass(frozen=True)
class WorkerCommand:
    """`python -m MODULE ARGS` or `python SCRIPT ARGS`, run by this interpreter."""

    module: str | None
    script: str | None
    args: tuple[str, ...]

    @classmethod
    def parse(cls, words: Sequence[str]) -> WorkerCommand:
        words = list(words)
        if words[:1] == ["--"]:
            words.pop(0)
        usage = "expected `-- python -m MODULE ARGS` or `-- python SCRIPT ARGS`"
        if not words or not _PYTHON.fullmatch(os.path.basename(words[0])):
            raise ValueError(f"{usage}, got {' '.join(words) or 'nothing'!r}")
        words.pop(0)
        if words[:1] == ["-m"]:
            if len(words) < 2:
                raise ValueError(f"{usage}: -m needs a module")
            return cls(module=words[1], script=None, args=tuple(words[2:]))
        if not words or words[0].startswith("-"):
            found = words[0] if words else "nothing"
            raise ValueError(f"{usage}: interpreter options are not supported, got {found!r}")
        return cls(module=None, script=words[0], args=tuple(words[1:]))

    def interpreter_args(self) -> list[str]:
        target = ["-m", self.module] if self.module is not None else [str(self.script)]
        return [*target, *self.args]

    def exec(self) -> NoReturn:
        """Replace this process with the command (same pid, nothing of shakedown left)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, *self.interpreter_args()])

    def run(self) -> None:
        """Run the command in this process, as `python` would run it as `__main__`."""
        if self.module is not None:
            sys.argv = [self.module, *self.args]  # runpy puts the module's file first
            sys.path.insert(0, os.getcwd())
            runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        else:
            script = str(self.script)
            sys.argv = [script, *self.args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")


def _rebind(
    modules: Mapping[str, Any], replacements: Mapping[int, Any], names: Sequence[str]
) -> None:
    """Point every `dynamo.*` module's `names` that hold an original at its replacement."""
    for module_name, module in list(modules.items()):
        if module is None or not (module_name == "dynamo" or module_name.startswith("dynamo.")):
            continue
        for name in names:
            current = getattr(module, name, None)
            if current is not None and id(current) in replacements:
                setattr(module, name, replacements[id(current)])


class _RuntimeRecorder(type):
    """Stands in for `DistributedRuntime` (a native class that cannot be subclassed): making
    one makes the real runtime and remembers it; class-level use goes to the real class."""

    real: Any = None
    latest: Any = None  # held strongly: the runtime allows no weak reference

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        runtime = cls.real(*args, **kwargs)
        cls.latest = runtime
        return runtime

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.real)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.real)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls.real, name)


class ReadinessHold:
    """hold=health on Dynamo's system status server (DYN_SYSTEM_PORT).

    `prepare_env` adds `RELEASE_ENDPOINT` to DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS before
    the worker makes its runtime, so `/health` needs that endpoint ready as well as the
    worker's own; `release` serves it on the worker's runtime, in the worker's namespace and
    component. Until then `/health` answers 503; afterwards, what the worker's endpoints say.
    """

    def __init__(self, core: Any) -> None:
        self._core = core
        self._recorder: Any = None
        self._serving: asyncio.Future[Any] | None = None

    @staticmethod
    def prepare_env(environ: MutableMapping[str, str]) -> None:
        raw = environ.get(ENDPOINT_HEALTH_VAR, "").strip()
        try:
            names = json.loads(raw) if raw else []
        except ValueError:
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"{ENDPOINT_HEALTH_VAR} must be a JSON array of endpoint names")
        if RELEASE_ENDPOINT not in names:
            environ[ENDPOINT_HEALTH_VAR] = json.dumps([*names, RELEASE_ENDPOINT])

    def install(self) -> None:
        real = self._core.DistributedRuntime
        recorder = _RuntimeRecorder("DistributedRuntime", (), {"real": real, "latest": None})
        self._core.DistributedRuntime = recorder
        _rebind(sys.modules, {id(real): recorder}, ["DistributedRuntime"])
        self._recorder = recorder

    async def release(self, engine: DynamoEngine) -> None:
        runtime = None if self._recorder is None else self._recorder.latest
        if runtime is None:
            raise RuntimeError("the worker made no DistributedRuntime to answer readiness")
        first = (await engine.client()).instances()[0]
        endpoint = runtime.endpoint(f"{first.namespace}.{first.component}.{RELEASE_ENDPOINT}")
        self._serving = asyncio.ensure_future(endpoint.serve_endpoint(_released))
        log.info("shakedown run: readiness released (endpoint %s)", RELEASE_ENDPOINT)

    @property
    def released(self) -> bool:
        return self._serving is not None


async def _released(request: Any, context: Any = None) -> Any:
    yield {"released": True}


def counted_handler(
    handler: Callable[..., AsyncIterator[Any]],
    activity: Activity,
    own_ids: Callable[[], set[str]],
) -> Callable[..., AsyncIterator[Any]]:
    """`handler` counting each request in `activity` for as long as its stream runs, unless
    its Dynamo request id is one of `own_ids()` (the loopback's). Takes `context` whether or
    not `handler` does (Dynamo passes it by that name), and hands it on only if it does."""
    try:
        takes_context = "context" in inspect.signature(handler).parameters
    except (TypeError, ValueError):
        takes_context = False

    async def counted(request: Any, context: Any = None) -> AsyncIterator[Any]:
        own = context is not None and context.id() in own_ids()
        if not own:
            activity.begin()
        try:
            source = handler(request, context=context) if takes_context else handler(request)
            try:
                async for item in source:
                    yield item
            finally:
                aclose = getattr(source, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            if not own:
                activity.end()

    return counted


@contextlib.contextmanager
def card_model_dir(model_dir: str, template: str | None) -> Iterator[str]:
    """`model_dir`, or with a custom chat template a temporary view of it whose
    `chat_template.jinja` (`.json`) is that template, as Dynamo's card would use it."""
    if template is None:
        yield model_dir
        return
    source = os.path.abspath(model_dir)
    with tempfile.TemporaryDirectory(prefix="shakedown-card-") as view:
        for entry in os.listdir(source):
            if entry not in ("chat_template.jinja", "chat_template.json"):
                os.symlink(os.path.join(source, entry), os.path.join(view, entry))
        name = "chat_template.json" if template.endswith(".json") else "chat_template.jinja"
        os.symlink(os.path.abspath(template), os.path.join(view, name))
        yield view


class RegistrationHold:
    """The patched registration entry points of one worker process, and what they decided."""

    NAMES = ("register_model", "register_llm", "unregister_model", "unregister_llm")

    def __init__(self, validation: WorkerValidation, *, core: Any = None) -> None:
        self.validation = validation
        self.mode = validation.config.hold
        self._core = core if core is not None else dynamo_core()
        self._real_register = self._core.register_model
        self._real_unregister = self._core.unregister_model
        # hold=health: registrations go through at once, recorded for rechecks to unpublish.
        self._held = HeldRegistration(self._real_register, held=self.mode is Hold.CARD)
        self._readiness = ReadinessHold(self._core) if self.mode is Hold.HEALTH else None
        self._rechecks = validation.config.recheck_s is not None
        self._engine: DynamoEngine | None = None
        # Made once: the patched names must stay identical objects wherever they are bound.
        self.register_model = self._register_model
        self.unregister_model = self._unregister_model
        self.claimed: Registration | None = None
        self.registered_at: float | None = None
        self.released_after_s: float | None = None
        self.on_claim: Callable[[], None] | None = None

    @property
    def patches(self) -> dict[str, Any]:
        return {
            "register_model": self.register_model,
            "register_llm": self.register_model,
            "unregister_model": self.unregister_model,
            "unregister_llm": self.unregister_model,
        }

    def install(self) -> None:
        """Patch `dynamo._core` and the `dynamo.*` modules loaded so far (normally none)."""
        for name, patch in self.patches.items():
            setattr(self._core, name, patch)
        _rebind(
            sys.modules,
            {id(self._real_register): self.register_model,
             id(self._real_unregister): self.unregister_model},
            self.NAMES,
        )  # fmt: skip
        if self._readiness is not None:
            self._readiness.install()
        if self._rechecks:
            self._count_served_requests()
        log.info("shakedown run: Dynamo registration held (hold=%s)", self.mode.value)

    def _count_served_requests(self) -> None:
        """Every handler the worker serves counts its requests as the worker's activity, so
        rechecks run only while it is idle."""
        endpoint_class = self._core.Endpoint
        real_serve = endpoint_class.serve_endpoint
        activity = self.validation.activity

        def own_ids() -> set[str]:
            return set() if self._engine is None else self._engine.in_flight_ids

        def serve_endpoint(endpoint: Any, handler: Any, *args: Any, **kwargs: Any) -> Any:
            if handler is not _released:
                handler = counted_handler(handler, activity, own_ids)
            return real_serve(endpoint, handler, *args, **kwargs)

        endpoint_class.serve_endpoint = serve_endpoint

    async def _register_model(self, *args: Any, **kwargs: Any) -> None:
        registration = registration_of(args, kwargs)
        released = self.validation.is_released
        await self._held.register_model(*args, **kwargs)  # under hold=card, until release
        if released:
            return
        if self.claimed is None:
            await self._claim(registration)
        else:
            log.info(
                "shakedown run: %r gets no loopback (%r has it); %s",
                registration.model_name or registration.model_path,
                self.claimed.model_name or self.claimed.model_path,
                "held until release" if self.mode is Hold.CARD else "published",
            )

    async def _unregister_model(self, *args: Any, **kwargs: Any) -> None:
        endpoint = kwargs.get("endpoint", args[0] if args else None)
        lora_name = kwargs.get("lora_name", args[1] if len(args) > 1 else None)
        if self.mode is Hold.CARD and self._held.withdraw(endpoint, lora_name):
            log.info("shakedown run: a held registration was withdrawn before release")
            return
        await self._real_unregister(*args, **kwargs)

    async def _claim(self, registration: Registration) -> None:
        name = registration.model_name or registration.model_path
        reason = ineligibility(registration.card(served_name=name))
        if reason is not None:
            log.warning(
                "shakedown run: %r gets no loopback: %s; %s",
                name,
                reason,
                "held until release" if self.mode is Hold.CARD else "published",
            )
            return
        self.claimed = registration
        self.registered_at = time.monotonic()
        if self.on_claim is not None:
            self.on_claim()
        try:
            model_dir = await local_model_dir(registration.model_path)
            with card_model_dir(model_dir, registration.custom_template_path) as card_dir:
                card = registration.card(model_dir=card_dir, served_name=name)
                self._engine = DynamoEngine(
                    dynamo_endpoint=registration.endpoint, wait_timeout_s=ENGINE_WAIT_S
                )
                self.validation.add_release_hook(self._release, name="dynamo registration")
                self.validation.add_unrelease_hook(self._unrelease, name="dynamo registration")
                self.validation.attach(card, self._engine)
            threading.Thread(
                target=self._return_memory, name="shakedown-run-memory", daemon=True
            ).start()
        except Exception:
            # The worker keeps running, held: its card stays unpublished (hold=card) or its
            # readiness not ready (hold=health); the report says why.
            log.exception("shakedown run: no loopback for %r; the worker stays held", name)

    async def _release(self) -> None:
        if self._readiness is not None and not self._readiness.released:
            assert self._engine is not None
            await self._readiness.release(self._engine)
        await self._held.release()  # after an unrelease, under either hold: publish anew
        if self.registered_at is not None:
            self.released_after_s = time.monotonic() - self.registered_at
            log.info(
                "shakedown run: released %.3fs after the registration call",
                self.released_after_s,
            )

    async def _unrelease(self) -> None:
        await self._held.unpublish(self._real_unregister)

    def _return_memory(self) -> None:
        """Once released (the loopback closed), give the pipeline's memory back to the OS:
        the worker runs for a long time after, and glibc keeps freed heap otherwise."""
        self.validation.wait_finished()
        if self.validation.is_released:
            gc.collect()
            with contextlib.suppress(OSError, AttributeError):  # not glibc
                ctypes.CDLL(None).malloc_trim(0)


class _SignalChain:
    """SIGTERM/SIGINT: tell `on_signal` first, then do what the worker's own handling does.

    The worker may install its handlers after this (asyncio's `add_signal_handler`, which
    keeps receiving through its wakeup fd when a Python handler is put back in front), so
    `install` is repeated once the worker has registered. A default action is replaced by an
    exception that unwinds the worker, so this process still ends its gates and reports.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        self._on_signal = on_signal
        self._previous: dict[int, Any] = {}
        self.received: int | None = None

    def install(self) -> None:
        for signum in self.SIGNALS:
            current = signal.getsignal(signum)
            if current == self._handle:
                continue
            try:
                signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: the worker's own handling stays alone
                return
            self._previous[signum] = current

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        self._on_signal(signum)
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise SystemExit(128 + signum)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_held(
    command: WorkerCommand,
    validation: WorkerValidation,
    *,
    health_port: int | None = None,
    health_host: str = "127.0.0.1",
) -> int:
    """Run `command` with its registrations held by `validation`; returns the exit status:
    the worker's own once released, EXIT_HELD when it ended unreleased, EXIT_CRASHED when it
    raised (or exited non-zero on its own before release)."""
    hold = RegistrationHold(validation)
    stopper: list[threading.Thread] = []

    def stop_validation(signum: int) -> None:
        if stopper:
            return
        if validation.is_released:
            # Rechecks on: no new one (the engine is shutting down), and the loopback closes
            # now rather than after the worker's loop, so none of its requests outlives it.
            validation.stop_rechecks()
            if validation.endpoint is None:
                return
            log.info("shakedown run: %s: stopping the rechecks", signal.Signals(signum).name)
        else:
            log.warning(
                "shakedown run: %s during validation: stopping the gates",
                signal.Signals(signum).name,
            )
        # Not in the handler itself: closing joins the validation thread.
        thread = threading.Thread(target=validation.close, name="shakedown-run-stop")
        stopper.append(thread)
        thread.start()

    signals = _SignalChain(stop_validation)
    hold.on_claim = signals.install
    hold.install()
    signals.install()
    health = None
    if health_port is not None:
        health = HealthServer(validation, host=health_host, port=health_port)
        health.start()
    status = 0
    crashed = False
    try:
        command.run()
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt:
        status = 128 + signal.SIGINT
    except Exception:
        log.exception("shakedown run: the worker crashed")
        crashed = True
    finally:
        if stopper:
            stopper[0].join()
        else:
            validation.close()
        if health is not None:
            health.stop()
    if crashed:
        return EXIT_CRASHED
    if validation.is_released:
        return status
    if hold.claimed is None:
        log.warning("shakedown run: the worker ended before any model could be validated")
    return EXIT_HELD if status == 0 or signals.received is not None else EXIT_CRASHED


def _log_to_stderr() -> None:
    """Shakedown's own lines on stderr, whatever logging the worker sets up for itself."""
    logger = logging.getLogger("shakedown")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def run_from_args(args: argparse.Namespace) -> int:
    try:
        command = WorkerCommand.parse(args.command)
        validation = validation_from_args(args)
    except (ValidationConfigError, ValueError) as err:
        print(f"shakedown run: {err}", file=sys.stderr)
        return EXIT_USAGE
    if not validation.enabled:
        command.exec()
    _log_to_stderr()
    try:
        if validation.config.hold is Hold.HEALTH:
            ReadinessHold.prepare_env(os.environ)
        dynamo_core()
    except (ValueError, ImportError) as err:
        print(f"shakedown run: {err}", file=sys.stderr)
        return EXIT_USAGE
    return run_held(command, validation, health_port=args.health_port, health_host=args.health_host)


def add_run_subcommand(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a Dynamo Python worker with its model registration held until gates pass",
        description=(
            "Run `python -m MODULE ARGS` or `python SCRIPT ARGS` in this process with "
            "Dynamo's register_model held: the first chat model it registers gets the "
            "loopback endpoint, the gates run against it, and only on release is the "
            "registration published (hold=card) or the worker's /health made ready "
            "(hold=health). Without gates the command is exec'd untouched. Exit status: "
            f"the worker's own once released, {EXIT_HELD} held, {EXIT_CRASHED} crashed, "
            f"{EXIT_USAGE} bad usage."
        ),
    )
    add_gate_arguments(run)
    run.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- python -m MODULE ARGS | -- python SCRIPT ARGS",
    )
    run.set_defaults(func=run_from_args)
