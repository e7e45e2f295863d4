"""Hold a worker until its gates pass against the loopback endpoint, then release it.

Order of events for a gated worker::

    from_env()  ->  attach(card, engine)          claims the process's one endpoint, starts it,
                                                  registers the engine
                ->  gates run                      only once the endpoint serves and the engine
                                                  is registered
                ->  all pass: release hooks in order, released() returns, /health ready,
                              then the endpoint closes (with rechecks on it stays up)
                    any failure: held; the endpoint stays up for debugging; report says why
                ->  rechecks (optional, ``recheck.py``): K consecutive failures run the
                    unrelease hooks (state "unreleased", /health not ready under hold=health);
                    K consecutive passes after that run the release hooks again
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import importlib
import inspect
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from .activity import Activity
from .config import LOCAL_PORT_VAR, Hold, ValidationConfig
from .gates import KILL_GRACE_S, GateContext, run_gates
from .report import GateResult, ValidationReport

logger = logging.getLogger("shakedown.validation")

State = Literal["unattached", "waiting", "running", "released", "held", "unreleased"]
# How long close() waits for the validation thread: a stopped gate's group gets KILL_GRACE_S
# before SIGKILL, and its output a moment to drain.
CLOSE_WAIT_S = KILL_GRACE_S + 5.0
# The bound on the hooks a recheck runs (unrelease, re-release), the overall deadline being over.
RECHECK_HOOK_TIMEOUT_S = 60.0
ReleaseHook = Callable[[], object]
Hooks = list[tuple[str, ReleaseHook, asyncio.AbstractEventLoop | None]]


class ValidatedEndpoint(Protocol):
    """What validation needs of the loopback endpoint it validates through."""

    @property
    def port(self) -> int: ...

    def start(self) -> object:
        """Bind and serve; the port accepts connections when this returns."""

    def stop(self) -> object: ...

    def register_engine(self, engine: Any) -> None:
        """Make ``engine`` serve the card's model; until then model requests get 503."""


class EndpointFactory(Protocol):
    """Builds the (not yet started) endpoint for ``card``, or None when the card may not have
    one (a LoRA, a prefill-only worker, ...), having logged why. ``pipeline`` is the card's
    pipeline when the worker already built one."""

    def __call__(
        self, card: Any, *, port: int, api_key: str, enable_rl: bool, pipeline: Any = None
    ) -> ValidatedEndpoint | None: ...


class _Loopback:
    """``shakedown.endpoint``'s endpoint seen through the :class:`ValidatedEndpoint` protocol."""

    def __init__(self, endpoint: Any, registry: Any, engine_key: str) -> None:
        self._endpoint = endpoint
        self._registry = registry
        self._engine_key = engine_key

    @property
    def port(self) -> int:
        port: int = self._endpoint.port
        return port

    def start(self) -> object:
        return self._endpoint.start()

    def stop(self) -> object:
        return self._endpoint.stop()

    def register_engine(self, engine: Any) -> None:
        self._registry.register(self._engine_key, engine)

    def configuration_problem(self) -> str | None:
        """Why the card's parsers do not read its chat template, or None (``shakedown.doctor``)."""
        doctor = importlib.import_module("shakedown.doctor")
        problem: str | None = doctor.configuration_problem(
            self._endpoint.pipeline, self._endpoint.card
        )
        return problem


def loopback_endpoint(
    card: Any, *, port: int, api_key: str, enable_rl: bool, pipeline: Any = None
) -> ValidatedEndpoint | None:
    """The production endpoint: the embedded Dynamo-parity pipeline on 127.0.0.1."""
    # Imported late: the endpoint pulls in the Rust core, which the gate logic and workers
    # with validation off never need.
    endpoint_api = importlib.import_module("shakedown.endpoint")
    reason = endpoint_api.ineligibility(card)
    if reason is not None:
        logger.warning("worker validation: no local endpoint for %r: %s", card.name, reason)
        return None
    registry = endpoint_api.EngineRegistry()
    endpoint = endpoint_api.LocalEndpoint(
        card,
        endpoint_api.build_pipeline(card) if pipeline is None else pipeline,
        registry,
        port=port,
        api_key=api_key,
    )
    return _Loopback(endpoint, registry, card.endpoint)


# One local endpoint per process, whichever WorkerValidation object asks: two listeners would
# validate one worker twice, and a fixed DYN_WORKER_VALIDATION_LOCAL_PORT cannot bind twice.
_claim_lock = threading.Lock()
_claim_owner: WorkerValidation | None = None
_claim_model: str | None = None


class WorkerValidation:
    """One worker's validation: configuration, the claimed endpoint, gates, outcome, health."""

    def __init__(
        self,
        config: ValidationConfig,
        *,
        endpoint_factory: EndpointFactory = loopback_endpoint,
        log_dir: Path | None = None,
    ) -> None:
        self.config = config
        self._endpoint_factory = endpoint_factory
        self._log_dir = log_dir
        self._lock = threading.Lock()
        self._state: State = "unattached"
        self._reason = "waiting for the worker to attach its model"
        self._attached = False
        self._model: str | None = None
        self._card: Any = None
        self._endpoint: ValidatedEndpoint | None = None
        self._api_key = secrets.token_urlsafe(32)
        self._record: Any = None  # where an operator finds the endpoint (shakedown.checks.attach)
        self._engine_registered = threading.Event()
        self._cancel = threading.Event()
        self._released = threading.Event()
        self._finished = threading.Event()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._hooks: Hooks = []
        self._unrelease_hooks: Hooks = []
        self.activity = Activity()
        """The worker's in-flight user requests; rechecks start only when there are none."""
        self._rechecker: Any = None
        self._recheck_counts: Any = None
        if config.enabled and config.recheck_s is not None:
            self._recheck_counts = importlib.import_module(
                "shakedown.validation.recheck"
            ).RecheckCounts(interval_s=config.recheck_s, threshold=config.recheck_failures)
        self._thread: threading.Thread | None = None
        self._report: ValidationReport | None = None
        self._start_clock = time.monotonic()
        self._start_wall = time.time()

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        endpoint_factory: EndpointFactory = loopback_endpoint,
    ) -> WorkerValidation:
        """Read ``DYN_WORKER_VALIDATION_*``; raise ``ValidationConfigError`` on a bad value."""
        config = ValidationConfig.from_env(os.environ if environ is None else environ)
        if config.enabled:
            names = ", ".join(repr(gate.name) for gate in config.gates)
            logger.info(
                "worker validation on: gates %s, hold=%s%s",
                names,
                config.hold.value,
                ", in parallel" if config.parallel else "",
            )
        return cls(config, endpoint_factory=endpoint_factory)

    # --- state -----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @property
    def state(self) -> State:
        return self._state

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def report(self) -> ValidationReport | None:
        return self._report

    @property
    def api_key(self) -> str:
        """The bearer token the local endpoint requires (random, for this process only)."""
        return self._api_key

    @property
    def endpoint(self) -> ValidatedEndpoint | None:
        return self._endpoint

    @property
    def is_released(self) -> bool:
        return self._released.is_set()

    @property
    def rechecks(self) -> dict[str, Any] | None:
        """The rechecks so far (counts, the last verdict), or None when they are off."""
        counts = self._recheck_counts
        return None if counts is None else dict(counts.to_dict())

    @property
    def is_unreleased(self) -> bool:
        """Released once, then taken out of service by failed rechecks (until they pass)."""
        return self._state == "unreleased"

    @property
    def health_ready(self) -> bool:
        """Whether ``/health`` should say ready: always under hold=card, after release otherwise
        (and not while unreleased by rechecks)."""
        if self.config.hold is Hold.CARD or not self.enabled:
            return True
        return self.is_released and not self.is_unreleased

    # --- setup -----------------------------------------------------------------------------

    def add_release_hook(self, hook: ReleaseHook, *, name: str | None = None) -> None:
        """Run ``hook`` on release, after the hooks added before it (publishing the card is one).

        A hook that returns an awaitable is awaited on the event loop that was running when it
        was added (so it may touch that loop's objects); a plain hook runs on the validation
        thread. A hook that raises keeps the worker held.
        """
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            if self._finished.is_set():
                raise RuntimeError("release hooks must be added before validation finishes")
            self._hooks.append(_hook_entry(hook, name, loop))

    def add_unrelease_hook(self, hook: ReleaseHook, *, name: str | None = None) -> None:
        """Run ``hook`` when failed rechecks take the released worker out of service: the
        counterpart of a release hook (unpublish what it published). Unrelease hooks run in the
        reverse order of their adding, on the loop they were added from like release hooks;
        one that raises is logged and the others still run. Only rechecks
        (``DYN_WORKER_VALIDATION_RECHECK_S``) ever call them, never more than once in a row.

        With rechecks on, K passing rechecks after an unrelease run the release hooks again,
        so those must be able to run twice.
        """
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._unrelease_hooks.append(_hook_entry(hook, name, loop))

    def stop_rechecks(self) -> None:
        """Start no further recheck (the worker is shutting down); returns at once."""
        rechecker = self._rechecker
        if rechecker is not None:
            rechecker.request_stop()

    def attach(
        self,
        card: Any,
        engine: Any = None,
        *,
        served_name: str | None = None,
        pipeline: Any = None,
    ) -> ValidatedEndpoint | None:
        """Claim the process's local endpoint for ``card``, start it and register ``engine``.

        Returns the endpoint, or None when validation is off (the worker is released at once),
        when the endpoint is already claimed (another card, a LoRA, another validation
        object), or when the card may not have one (prefill-only, LoRA, no chat surface): such
        an attach is logged and otherwise ignored, and a validation left with no endpoint stays
        held. ``served_name`` defaults to ``card.served_name``, then ``card.name``.
        ``pipeline``: the card's ``shakedown.Pipeline`` when the worker already built one
        (the endpoint then serves through it instead of building its own).
        """
        global _claim_owner, _claim_model
        model = served_name or getattr(card, "served_name", None) or getattr(card, "name", None)
        if not isinstance(model, str) or not model:
            raise TypeError("attach needs the served model name (card.served_name or served_name=)")
        if not self.enabled:
            with self._lock:
                if self._attached:
                    return None
                self._attached = True
                self._model = model
            self._start_thread()
            return None
        with _claim_lock:
            if _claim_owner is not None:
                owner = "this validation" if _claim_owner is self else "another validation"
                logger.warning(
                    "worker validation: %r gets no local endpoint: %s already claimed the "
                    "process's one endpoint for %r",
                    model,
                    owner,
                    _claim_model,
                )
                if not self._attached:
                    # This validation's gates can never run, so its worker stays held.
                    self._reason = (
                        f"no local endpoint for {model!r}: the process's one endpoint serves "
                        f"{_claim_model!r}"
                    )
                return None
            # Building the endpoint inside the claim: a concurrent attach must not slip in
            # between the check and the listener.
            try:
                endpoint = self._endpoint_factory(
                    card,
                    port=self.config.local_port,
                    api_key=self._api_key,
                    enable_rl=self.config.enable_rl,
                    pipeline=pipeline,
                )
            except Exception as exc:
                self._hold_at_attach(model, f"the local endpoint could not be built: {exc!r}")
                raise
            if endpoint is None:
                if not self._attached:
                    self._reason = f"{model!r} may not have a local endpoint, so no gate can run"
                return None
            _claim_owner, _claim_model = self, model
        with self._lock:
            self._attached = True
            self._model = model
            self._card = card
            self._state = "waiting"
            self._reason = "waiting for the engine to register"
        self._start_clock, self._start_wall = time.monotonic(), time.time()
        try:
            endpoint.start()
        except OSError as exc:
            port = self.config.local_port
            where = f"127.0.0.1:{port} (set by {LOCAL_PORT_VAR})" if port else "127.0.0.1"
            error = OSError(
                exc.errno, f"the local endpoint cannot listen on {where}: {exc.strerror or exc}"
            )
            self._hold_at_attach(model, str(error))
            raise error from exc
        except Exception as exc:
            self._hold_at_attach(model, f"the local endpoint failed to start: {exc!r}")
            raise
        self._endpoint = endpoint
        logger.info(
            "worker validation: local endpoint for %r on http://127.0.0.1:%d/v1",
            model,
            endpoint.port,
        )
        # For an operator in the pod: where the endpoint and its token are (never the token).
        self._record = importlib.import_module("shakedown.checks.attach").publish(
            f"http://127.0.0.1:{endpoint.port}/v1",
            model,
            self._api_key,
            **self._parsers(),
        )
        self._start_thread()
        if engine is not None:
            self.register_engine(engine)
        return endpoint

    def _hold_at_attach(self, model: str, reason: str) -> None:
        with self._lock:
            self._attached = True
            self._model = model
        self._finish(held_reason=reason, gates=[])

    def register_engine(self, engine: Any) -> None:
        """Register the attached model's engine with the endpoint; the gates may then start."""
        if self._endpoint is None or self._model is None:
            raise RuntimeError("register_engine needs an attached endpoint")
        if self._engine_registered.is_set():
            raise RuntimeError(f"an engine is already registered for {self._model!r}")
        self._endpoint.register_engine(engine)
        self._engine_registered.set()

    # --- waiting ---------------------------------------------------------------------------

    async def released(self) -> None:
        """Return once the worker is released; a held worker never returns."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._released.is_set():
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))

    def wait_released(self, timeout: float | None = None) -> bool:
        return self._released.wait(timeout)

    def wait_finished(self, timeout: float | None = None) -> ValidationReport | None:
        """Block until validation has an outcome and acted on it (a released worker's endpoint
        is closed by then); return the report, or None on timeout."""
        self._finished.wait(timeout)
        return self._report

    def close(self) -> None:
        """Stop running gates (their process groups are killed), close the endpoint, and give
        the process's endpoint claim back. A worker stopped before its gates passed is never
        released.

        Waits a bounded time for the validation thread: every gate and async hook heeds the
        stop at once, but a release hook that blocks without end cannot be interrupted.
        """
        global _claim_owner, _claim_model
        self._cancel.set()
        self.stop_rechecks()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)
            if thread.is_alive():
                logger.error(
                    "worker validation: still running %.0fs after close (a blocking release "
                    "hook?); closing the endpoint anyway",
                    CLOSE_WAIT_S,
                )
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            endpoint.stop()
        # After the endpoint: a recheck's requests then end at once instead of at their timeout.
        rechecker = self._rechecker
        if rechecker is not None and not rechecker.join(CLOSE_WAIT_S):
            logger.error("worker validation: a recheck still runs %.0fs after close", CLOSE_WAIT_S)
        self._withdraw_record()
        with _claim_lock:
            if _claim_owner is self:
                _claim_owner, _claim_model = None, None

    # --- the validation thread ---------------------------------------------------------------

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="shakedown-validation", daemon=True)
        self._thread.start()

    def _deadline(self) -> float | None:
        if self.config.timeout_s is None:
            return None
        return self._start_clock + self.config.timeout_s

    def _run(self) -> None:
        try:
            if not self.enabled:
                self._finish(held_reason=None, gates=[])
                return
            # A parser that does not match the template holds the worker before any gate.
            check = getattr(self._endpoint, "configuration_problem", None)
            problem = check() if check is not None else None
            if problem is not None:
                self._finish(held_reason=f"the configuration is wrong: {problem}", gates=[])
                return
            if not self._wait_for_engine():
                return
            with self._lock:
                self._state = "running"
                self._reason = "validation gates are running"
            self._run_gates()
        except BaseException as exc:  # a bug here must hold the worker, never release it
            logger.exception("worker validation crashed")
            self._finish(held_reason=f"validation crashed: {exc!r}", gates=[])

    def _run_gates(self) -> None:
        assert self._endpoint is not None and self._model is not None
        # An unusable log directory (a symlink, another user's) fails each exec gate.
        log_dir, temporary = self._gate_log_dir()
        try:
            results = run_gates(
                self.config.gates,
                GateContext(
                    base_url=f"http://127.0.0.1:{self._endpoint.port}/v1",
                    model=self._model,
                    api_key=self._api_key,
                    log_dir=log_dir,
                    extra_env=self._parser_env(),
                    inherit_env=self.config.inherit_env,
                ),
                parallel=self.config.parallel,
                deadline=self._deadline(),
                cancel=self._cancel,
            )
        finally:
            if temporary:
                shutil.rmtree(log_dir, ignore_errors=True)
        if temporary:  # the report keeps each log's tail; the files are gone
            results = [dataclasses.replace(result, log_path=None) for result in results]
        self._finish(held_reason=self._held_by(results), gates=results)

    def _held_by(self, results: list[GateResult]) -> str | None:
        """Why these results hold the worker, or None when every configured gate passed."""
        configured = [gate.name for gate in self.config.gates]
        if [result.name for result in results] != configured:
            return f"gate results do not match the configured gates {configured}"
        if all(result.passed for result in results):
            return None
        failed = [result for result in results if result.outcome == "failed"]
        # Skipped without a failure: validation was stopped before they ran.
        listed = failed or [result for result in results if not result.passed]
        names = ", ".join(f"{result.name!r} ({result.reason})" for result in listed)
        return f"gate(s) failed: {names}" if failed else f"gate(s) not run: {names}"

    def _wait_for_engine(self) -> bool:
        deadline = self._deadline()
        while not self._engine_registered.is_set():
            if self._cancel.is_set():
                self._finish(
                    held_reason="validation was stopped before the engine registered", gates=[]
                )
                return False
            if deadline is not None and time.monotonic() >= deadline:
                self._finish(
                    held_reason=(
                        f"the engine did not register within the overall deadline "
                        f"({self.config.timeout_s:g}s)"
                    ),
                    gates=[],
                )
                return False
            self._engine_registered.wait(0.05)
        return True

    def _parsers(self) -> dict[str, str]:
        parsers: dict[str, str] = {}
        for attr in ("reasoning_parser", "tool_call_parser"):
            value = getattr(self._card, attr, None)
            if isinstance(value, str) and value:
                parsers[attr] = value
        return parsers

    def _parser_env(self) -> dict[str, str]:
        # Tell the check runner which parsers the card uses, so it knows to expect
        # reasoning_content and tool calls.
        return {f"DYN_VALIDATION_{attr.upper()}": value for attr, value in self._parsers().items()}

    def _gate_log_dir(self) -> tuple[Path, bool]:
        """Where gate logs go, and whether the directory is temporary (removed at the end)."""
        if self._log_dir is not None:
            return self._log_dir, False
        if self.config.report_path is not None:
            path = self.config.report_path
            return path.with_name(path.stem + "-logs"), False
        return Path(tempfile.mkdtemp(prefix="shakedown-validation-")), True

    def _run_hooks(self, deadline: float | None) -> str | None:
        """Run the release hooks in order; return why one failed, or None."""
        for name, hook, loop in list(self._hooks):
            if self._cancel.is_set():
                return f"validation was stopped before release hook {name!r}"
            try:
                outcome = hook()
                if inspect.isawaitable(outcome):
                    _await_on(outcome, loop, deadline, self._cancel)
            except BaseException as exc:
                logger.exception("worker validation: release hook %r failed", name)
                return f"release hook {name!r} failed: {exc!r}"
        return None

    def _finish(self, *, held_reason: str | None, gates: list[GateResult]) -> None:
        if held_reason is None and self._cancel.is_set():
            held_reason = "validation was stopped"
        if held_reason is None:
            held_reason = self._run_hooks(self._deadline())
        if held_reason is None and self._cancel.is_set():
            held_reason = "validation was stopped while the release hooks ran"
        status: Literal["released", "held"] = "released" if held_reason is None else "held"
        reason = held_reason or (
            f"all {len(self.config.gates)} gate(s) passed" if self.enabled else "validation is off"
        )
        endpoint = self._endpoint
        report = ValidationReport(
            status=status,
            reason=reason,
            model=self._model,
            base_url=None if endpoint is None else f"http://127.0.0.1:{endpoint.port}/v1",
            parallel=self.config.parallel,
            started_at=self._start_wall,
            duration_s=time.monotonic() - self._start_clock,
            gates=gates,
            token_file=None if self._record is None else self._record.token_file,
            recheck=None if self._recheck_counts is None else self._recheck_counts.to_dict(),
        )
        with self._lock:
            self._report = report
            self._state = status
            self._reason = reason
            if status == "released":
                self._released.set()
                waiters, self._waiters = self._waiters, []
            else:
                waiters = []
        try:
            self._publish_report(report)
        finally:
            self._wake(waiters)
            if status == "released" and endpoint is not None:
                if self.config.recheck_s is not None:
                    self._start_rechecks(endpoint)
                else:
                    self._close_released_endpoint(endpoint)
            self._finished.set()

    def _publish_report(self, report: ValidationReport) -> None:
        if not self.enabled:
            return
        try:
            report.log()
            if self.config.report_path is not None:
                json_path, xml_path = report.write(self.config.report_path)
                logger.info("worker validation report: %s, %s", json_path, xml_path)
        except Exception:  # the outcome stands; only its record is missing
            logger.exception("could not write the validation report")

    @staticmethod
    def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
        for loop, future in waiters:
            # A closed loop raises RuntimeError: nobody is waiting on it any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, future)

    def _close_released_endpoint(self, endpoint: ValidatedEndpoint) -> None:
        # Released workers take real traffic through the fleet; the loopback is done.
        self._endpoint = None
        try:
            endpoint.stop()
            logger.info("worker validation: released; local endpoint closed")
        except Exception:  # the worker is released either way; only the loopback lingers
            logger.exception("worker validation: the local endpoint did not close cleanly")
        self._withdraw_record()

    # --- rechecks after release -------------------------------------------------------------

    def _start_rechecks(self, endpoint: ValidatedEndpoint) -> None:
        # The loopback stays up (token-protected, 127.0.0.1): a recheck then costs its
        # requests only, and cannot fail for a rebuild's reasons (docs/checks.md).
        recheck = importlib.import_module("shakedown.validation.recheck")
        checks = importlib.import_module("shakedown.checks")
        parsers = self._parsers()
        assert self.config.recheck_s is not None
        self._rechecker = recheck.Rechecker(
            interval_s=self.config.recheck_s,
            suite=self.config.recheck_suite or recheck.recheck_suite(),
            settings=checks.Settings(
                base_url=f"http://127.0.0.1:{endpoint.port}/v1",
                api_key=self._api_key,
                model=self._model,
                timeout_s=recheck.REQUEST_TIMEOUT_S,
                expect_reasoning="reasoning_parser" in parsers,
                expect_tools="tool_call_parser" in parsers,
            ),
            activity=self.activity,
            on_result=self._on_recheck,
        )
        if self._cancel.is_set():
            return
        self._rechecker.start()
        logger.info(
            "worker validation: released; rechecking every %gs of idleness (%d in a row to "
            "unrelease)",
            self.config.recheck_s,
            self.config.recheck_failures,
        )

    def _on_recheck(self, result: Any) -> None:
        """Count a recheck; act when K in a row say the same thing against the current state."""
        counts = self._recheck_counts
        setattr(counts, result.verdict, getattr(counts, result.verdict) + 1)
        counts.last = {
            "verdict": result.verdict,
            "duration_s": round(result.duration_s, 3),
            "busy": result.busy,
            "reason": result.why(),
        }
        if result.verdict == "inconclusive":
            logger.info(
                "worker validation: recheck inconclusive (the worker was busy): %s", result.why()
            )
            return
        if result.verdict == "failed":
            counts.consecutive_failures += 1
            counts.consecutive_passes = 0
            logger.warning(
                "worker validation: recheck failed (%d/%d): %s",
                counts.consecutive_failures,
                counts.threshold,
                result.why(),
            )
        else:
            counts.consecutive_passes += 1
            counts.consecutive_failures = 0
        if self._state == "released" and counts.consecutive_failures >= counts.threshold:
            self._unrelease(
                f"{counts.consecutive_failures} rechecks in a row failed; last: {result.why()}"
            )
        elif self._state == "unreleased" and counts.consecutive_passes >= counts.threshold:
            self._rerelease(counts.consecutive_passes)

    def _unrelease(self, why: str) -> None:
        deadline = time.monotonic() + RECHECK_HOOK_TIMEOUT_S
        problems = []
        for name, hook, loop in reversed(list(self._unrelease_hooks)):
            try:
                outcome = hook()
                if inspect.isawaitable(outcome):
                    _await_on(outcome, loop, deadline, self._cancel)
            except BaseException as exc:
                logger.exception("worker validation: unrelease hook %r failed", name)
                problems.append(f"unrelease hook {name!r} failed: {exc!r}")
        reason = "; ".join([why, *problems])
        self._recheck_counts.consecutive_passes = 0
        self._set_recheck_state("unreleased", reason)

    def _rerelease(self, passes: int) -> None:
        problem = self._run_hooks(time.monotonic() + RECHECK_HOOK_TIMEOUT_S)
        if problem is not None:
            # Still out of service; K more passes try again.
            self._recheck_counts.consecutive_passes = 0
            self._set_recheck_state("unreleased", f"re-release failed: {problem}")
            return
        self._set_recheck_state("released", f"released again: {passes} rechecks in a row passed")

    def _set_recheck_state(self, state: Literal["released", "unreleased"], reason: str) -> None:
        report = self._report
        if report is not None:
            # Written before the state changes: whoever sees the new state finds its report.
            report = dataclasses.replace(
                report, status=state, reason=reason, recheck=self._recheck_counts.to_dict()
            )
            self._publish_report(report)
        with self._lock:
            self._state, self._reason, self._report = state, reason, report

    def _withdraw_record(self) -> None:
        record, self._record = self._record, None
        if record is not None:
            importlib.import_module("shakedown.checks.attach").withdraw(record)


def _hook_entry(
    hook: ReleaseHook, name: str | None, loop: asyncio.AbstractEventLoop | None
) -> tuple[str, ReleaseHook, asyncio.AbstractEventLoop | None]:
    return name or str(getattr(hook, "__qualname__", repr(hook))), hook, loop


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _await_on(
    awaitable: Any,
    loop: asyncio.AbstractEventLoop | None,
    deadline: float | None,
    cancel: threading.Event,
) -> None:
    """Await a release hook's result on ``loop`` (or a fresh one) from the validation thread.

    Polls ``cancel`` so that close(), even when called from ``loop``'s own thread, is never
    stuck joining a thread that waits for that loop.
    """

    async def run() -> None:
        await awaitable

    if loop is None:
        asyncio.run(run())
        return
    future: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(run(), loop)
    while True:
        try:
            future.result(0.05)
            return
        except concurrent.futures.TimeoutError:
            pass
        if cancel.is_set():
            future.cancel()
            raise RuntimeError("validation was stopped")
        if deadline is not None and time.monotonic() >= deadline:
            future.cancel()
            raise TimeoutError("did not finish within the overall deadline")
