"""Worker validation settings, read from the environment.

Every malformed value raises :class:`ValidationConfigError` naming the variable and what is wrong,
so a worker with a typo in its gates fails closed at start-up instead of releasing unvalidated.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from shakedown._core import ShakedownError
from shakedown.httpclient import parse_url

GATES_VAR = "DYN_WORKER_VALIDATION_GATES"
PARALLEL_VAR = "DYN_WORKER_VALIDATION_PARALLEL"
LOCAL_PORT_VAR = "DYN_WORKER_VALIDATION_LOCAL_PORT"
HOLD_VAR = "DYN_WORKER_VALIDATION_HOLD"
TIMEOUT_VAR = "DYN_WORKER_VALIDATION_TIMEOUT_S"
REPORT_VAR = "DYN_WORKER_VALIDATION_REPORT"
INHERIT_ENV_VAR = "DYN_WORKER_VALIDATION_INHERIT_ENV"
ENABLE_RL_VAR = "DYN_ENABLE_RL"
RECHECK_VAR = "DYN_WORKER_VALIDATION_RECHECK_S"
RECHECK_FAILURES_VAR = "DYN_WORKER_VALIDATION_RECHECK_FAILURES"
RECHECK_SUITE_VAR = "DYN_WORKER_VALIDATION_RECHECK_SUITE"

DEFAULT_RECHECK_FAILURES = 3

DEFAULT_GATE_TIMEOUT_S = 600.0

# Variables every gate receives from the worker; a gate's own env must not override them, or it
# could point the checks somewhere other than this worker's loopback endpoint.
INJECTED_VARS = frozenset({"OPENAI_BASE_URL", "OPENAI_API_KEY", "DYN_VALIDATION_MODEL"})

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class ValidationConfigError(ShakedownError, ValueError):
    """A validation setting in the environment is malformed; the worker must not be released."""


class Hold(enum.Enum):
    """How a held worker is kept away from traffic until its gates pass."""

    CARD = "card"
    """The model card stays out of discovery until release (publishing it is a release hook)."""
    HEALTH = "health"
    """The card is published at once, but ``/health`` answers 503 until release."""


@dataclass(frozen=True)
class ExecGate:
    """Run a command; exit status 0 passes.

    The command gets an allow-listed part of the worker's environment (``gates.ALLOWED_ENV``),
    the names in ``pass_env``, ``env`` and the endpoint's coordinates; ``inherit_env`` passes
    the worker's whole environment instead of the allow-list.
    """

    name: str
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_GATE_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    inherit_env: bool = False


@dataclass(frozen=True)
class UrlGate:
    """POST the endpoint's coordinates to a sidecar; HTTP 200 passes."""

    name: str
    url: str
    timeout_s: float = DEFAULT_GATE_TIMEOUT_S


Gate = ExecGate | UrlGate


def default_gates() -> tuple[Gate, ...]:
    """The reference check runner, run with this interpreter so no console script is needed."""
    return (ExecGate(name="shakedown-check", argv=(sys.executable, "-m", "shakedown.checks")),)


@dataclass(frozen=True)
class ValidationConfig:
    gates: tuple[Gate, ...] = ()
    parallel: bool = False
    local_port: int = 0
    hold: Hold = Hold.CARD
    timeout_s: float | None = None
    report_path: Path | None = None
    enable_rl: bool = False
    inherit_env: bool = False
    """Every exec gate gets the worker's whole environment, not only the allow-list."""
    recheck_s: float | None = None
    """After release, re-run the recheck suite once the worker has been idle this long."""
    recheck_failures: int = DEFAULT_RECHECK_FAILURES
    """Consecutive failed rechecks that unrelease the worker (and passes that re-release it)."""
    recheck_suite: Any = None
    """The ``shakedown.checks.Suite`` rechecks run; None: the built-in cheap suite."""

    @property
    def enabled(self) -> bool:
        return bool(self.gates)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ValidationConfig:
        """Read every setting; raise :class:`ValidationConfigError` on the first bad one."""
        report = environ.get(REPORT_VAR, "").strip()
        if "\0" in report:
            raise ValidationConfigError(f"{REPORT_VAR} contains a NUL byte")
        return cls(
            gates=parse_gates(environ.get(GATES_VAR, "")),
            parallel=_parse_bool(PARALLEL_VAR, environ.get(PARALLEL_VAR, "")),
            local_port=_parse_port(environ.get(LOCAL_PORT_VAR, "")),
            hold=_parse_hold(environ.get(HOLD_VAR, "")),
            timeout_s=_parse_overall_timeout(environ.get(TIMEOUT_VAR, "")),
            report_path=Path(report) if report else None,
            enable_rl=_parse_bool(ENABLE_RL_VAR, environ.get(ENABLE_RL_VAR, "")),
            inherit_env=_parse_bool(INHERIT_ENV_VAR, environ.get(INHERIT_ENV_VAR, "")),
            recheck_s=_parse_recheck_interval(environ.get(RECHECK_VAR, "")),
            recheck_failures=_parse_recheck_failures(environ.get(RECHECK_FAILURES_VAR, "")),
            recheck_suite=_parse_recheck_suite(environ.get(RECHECK_SUITE_VAR, "")),
        )


def parse_gates(value: str) -> tuple[Gate, ...]:
    """Parse ``DYN_WORKER_VALIDATION_GATES``: a JSON array, or the ``;``-separated shorthand.

    Only the empty string means no gates: a value of blanks is more likely a template that
    lost its gates than a decision to turn validation off.
    """
    if not value:
        return ()
    text = value.strip()
    if not text:
        raise ValidationConfigError(
            f"{GATES_VAR} is set but blank; unset it to turn validation off"
        )
    gates = _parse_json_gates(text) if text.startswith("[") else _parse_shorthand(text)
    if not gates:
        raise ValidationConfigError(f"{GATES_VAR} is set but names no gate: {value!r}")
    return gates


def _parse_json_gates(text: str) -> tuple[Gate, ...]:
    try:
        items = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValidationConfigError(f"{GATES_VAR} is not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise ValidationConfigError(f"{GATES_VAR} must be a JSON array of gates")
    gates: list[Gate] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        gate = _parse_json_gate(index, item)
        if gate.name in seen:
            raise ValidationConfigError(f"{GATES_VAR}: two gates are named {gate.name!r}")
        seen.add(gate.name)
        gates.append(gate)
    return tuple(gates)


def _parse_json_gate(index: int, item: object) -> Gate:
    where = f"{GATES_VAR}[{index}]"
    if not isinstance(item, dict):
        raise ValidationConfigError(f"{where} must be an object, got {type(item).__name__}")
    unknown = sorted(set(item) - {"name", "exec", "url", "timeout_s", *_EXEC_ONLY})
    if unknown:
        raise ValidationConfigError(f"{where} has unknown keys: {', '.join(unknown)}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValidationConfigError(f"{where} needs a non-empty string 'name'")
    where = f"{where} ({name!r})"
    timeout_s = DEFAULT_GATE_TIMEOUT_S
    if "timeout_s" in item:
        timeout_s = _positive_seconds(where + ".timeout_s", item["timeout_s"])
    has_exec, has_url = "exec" in item, "url" in item
    if has_exec == has_url:
        raise ValidationConfigError(f"{where} needs exactly one of 'exec' or 'url'")
    if has_url:
        misplaced = sorted(_EXEC_ONLY & set(item))
        if misplaced:
            raise ValidationConfigError(
                f"{where}: {', '.join(map(repr, misplaced))} apply to exec gates only"
            )
        url = item["url"]
        if not isinstance(url, str):
            raise ValidationConfigError(f"{where}.url must be a string")
        return UrlGate(name=name, url=_check_url(where, url), timeout_s=timeout_s)
    argv = item["exec"]
    if (
        not isinstance(argv, list)
        or not argv
        or not all(isinstance(arg, str) for arg in argv)
        or not argv[0]
    ):
        raise ValidationConfigError(f"{where}.exec must be a non-empty array of strings (argv)")
    inherit_env = item.get("inherit_env", False)
    if not isinstance(inherit_env, bool):
        raise ValidationConfigError(f"{where}.inherit_env must be true or false")
    return ExecGate(
        name=name,
        argv=_check_argv(where, argv),
        timeout_s=timeout_s,
        env=_parse_env(where, item.get("env", {})),
        pass_env=_parse_pass_env(where, item.get("pass_env", [])),
        inherit_env=inherit_env,
    )


_EXEC_ONLY = frozenset({"env", "pass_env", "inherit_env"})


def _check_argv(where: str, argv: list[str]) -> tuple[str, ...]:
    for index, arg in enumerate(argv):
        if "\0" in arg:
            raise ValidationConfigError(f"{where}.exec[{index}] contains a NUL byte: {arg!r}")
    return tuple(argv)


def _check_env_name(where: str, name: str) -> None:
    if not name or "=" in name or "\0" in name:
        raise ValidationConfigError(
            f"{where}: {name!r} is not an environment variable name (empty, '=' or NUL)"
        )


def _parse_env(where: str, env: object) -> dict[str, str]:
    if not isinstance(env, dict) or not all(
        isinstance(key, str) and isinstance(val, str) for key, val in env.items()
    ):
        raise ValidationConfigError(f"{where}.env must be an object of string to string")
    for key, val in env.items():
        _check_env_name(f"{where}.env", key)
        if "\0" in val:
            raise ValidationConfigError(f"{where}.env[{key!r}] contains a NUL byte")
    overridden = sorted(INJECTED_VARS & set(env))
    if overridden:
        raise ValidationConfigError(
            f"{where}.env may not set {', '.join(overridden)}: the worker sets them"
        )
    return dict(env)


def _parse_pass_env(where: str, names: object) -> tuple[str, ...]:
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValidationConfigError(f"{where}.pass_env must be an array of variable names")
    for name in names:
        _check_env_name(f"{where}.pass_env", name)
    return tuple(names)


def _parse_shorthand(text: str) -> tuple[Gate, ...]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise ValidationConfigError(f"{GATES_VAR}: cannot split {text!r}: {exc}") from None
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) == {";"}:
            segments.append([])
        else:
            segments[-1].append(token)
    gates: list[Gate] = []
    names: dict[str, int] = {}
    for segment in segments:
        if not segment:
            continue
        gate = _parse_shorthand_gate(segment)
        # Shorthand gates are named by what they run; repeats get a #n suffix to stay unique.
        count = names.get(gate.name, 0) + 1
        names[gate.name] = count
        if count > 1:
            gate = _renamed(gate, f"{gate.name}#{count}")
        gates.append(gate)
    return tuple(gates)


def _parse_shorthand_gate(segment: list[str]) -> Gate:
    head, rest = segment[0], segment[1:]
    if head.startswith("exec:"):
        argv = ([head[5:]] if head[5:] else []) + rest
        if not argv:
            raise ValidationConfigError(f"{GATES_VAR}: 'exec:' needs a command")
        return ExecGate(name=shlex.join(argv), argv=_check_argv(GATES_VAR, argv))
    if head.startswith("url:"):
        parts = ([head[4:]] if head[4:] else []) + rest
        if len(parts) != 1:
            raise ValidationConfigError(f"{GATES_VAR}: 'url:' needs exactly one URL, got {parts}")
        return UrlGate(name=parts[0], url=_check_url(GATES_VAR, parts[0]))
    raise ValidationConfigError(
        f"{GATES_VAR}: each gate must start with 'exec:' or 'url:' (or be a JSON array); "
        f"got {shlex.join(segment)!r}"
    )


def _renamed(gate: Gate, name: str) -> Gate:
    return dataclasses.replace(gate, name=name)


def _check_url(where: str, url: str) -> str:
    try:
        parsed = parse_url(url)
    except ValueError as exc:
        raise ValidationConfigError(f"{where}: {exc}") from None
    if parsed.scheme == "http" and not parsed.is_loopback:
        # The sidecar is sent the endpoint's bearer token: not in clear text off this host.
        raise ValidationConfigError(
            f"{where}: {url!r} is plain http to a host that is not loopback; the gate sends "
            "the endpoint's token, so use https (or a loopback address)"
        )
    return url


def _positive_seconds(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationConfigError(f"{where} must be a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValidationConfigError(f"{where} must be a positive number of seconds, got {value}")
    return seconds


def _parse_bool(var: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValidationConfigError(f"{var} must be 1/0, true/false, yes/no or on/off, got {value!r}")


def _parse_port(value: str) -> int:
    text = value.strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) > 65535:
        raise ValidationConfigError(f"{LOCAL_PORT_VAR} must be a port 0-65535, got {value!r}")
    return int(text)


def _parse_hold(value: str) -> Hold:
    text = value.strip().lower()
    if not text:
        return Hold.CARD
    try:
        return Hold(text)
    except ValueError:
        raise ValidationConfigError(
            f"{HOLD_VAR} must be 'card' or 'health', got {value!r}"
        ) from None


def _seconds_text(value: str, error: str) -> float | None:
    """A number of seconds written in a variable; None when blank."""
    text = value.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValidationConfigError(error) from None


def _parse_overall_timeout(value: str) -> float | None:
    seconds = _seconds_text(value, f"{TIMEOUT_VAR} must be a number of seconds, got {value!r}")
    return None if seconds is None else _positive_seconds(TIMEOUT_VAR, seconds)


def _parse_recheck_interval(value: str) -> float | None:
    error = f"{RECHECK_VAR} must be a number of seconds (0 or unset: off), got {value!r}"
    seconds = _seconds_text(value, error)
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValidationConfigError(error)
    return seconds or None


def _parse_recheck_failures(value: str) -> int:
    text = value.strip()
    if not text:
        return DEFAULT_RECHECK_FAILURES
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValidationConfigError(
            f"{RECHECK_FAILURES_VAR} must be a whole number >= 1, got {value!r}"
        )
    return int(text)


def _parse_recheck_suite(value: str) -> Any:
    """The suite file, loaded now: a broken suite is a start-up error, not a failed recheck."""
    text = value.strip()
    if not text:
        return None
    from shakedown.checks import SuiteError, load_suite  # only when a suite is named

    try:
        return load_suite(Path(text))
    except SuiteError as exc:
        raise ValidationConfigError(f"{RECHECK_SUITE_VAR}: {exc}") from None
