"""Worker validation settings, read from the environment.

Every malformed value raises :class:`ValidationConfigError` naming the variable and what is wrong,
so a worker with a typo in its gates fails closed at start-up instead of releasing unvalidated.
"""

from __future__ import annotations

import enum
import math
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from shakedown._core import ShakedownError

GATES_VAR = "DYN_WORKER_VALIDATION_GATES"
PARALLEL_VAR = "DYN_WORKER_VALIDATION_PARALLEL"
LOCAL_PORT_VAR = "DYN_WORKER_VALIDATION_LOCAL_PORT"
HOLD_VAR = "DYN_WORKER_VALIDATION_HOLD"
TIMEOUT_VAR = "DYN_WORKER_VALIDATION_TIMEOUT_S"
REPORT_VAR = "DYN_WORKER_VALIDATION_REPORT"
ENABLE_RL_VAR = "DYN_ENABLE_RL"

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
    """Run a command; exit status 0 passes."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_GATE_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict)


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

    @property
    def enabled(self) -> bool:
        return bool(self.gates)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ValidationConfig:
        """Read every setting; raise :class:`ValidationConfigError` on the first bad one."""
        report = environ.get(REPORT_VAR, "").strip()
        return cls(
            gates=parse_gates(environ.get(GATES_VAR, "")),
            parallel=_parse_bool(PARALLEL_VAR, environ.get(PARALLEL_VAR, "")),
            local_port=_parse_port(environ.get(LOCAL_PORT_VAR, "")),
            hold=_parse_hold(environ.get(HOLD_VAR, "")),
            timeout_s=_parse_overall_timeout(environ.get(TIMEOUT_VAR, "")),
            report_path=Path(report) if report else None,
            enable_rl=_parse_bool(ENABLE_RL_VAR, environ.get(ENABLE_RL_VAR, "")),
        )


def parse_gates(value: str) -> tuple[Gate, ...]:
    """Parse ``DYN_WORKER_VALIDATION_GATES``: a JSON array, or the ``;``-separated shorthand."""
    text = value.strip()
    if not text:
        return ()
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
    unknown = sorted(set(item) - {"name", "exec", "url", "timeout_s", "env"})
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
        if "env" in item:
            raise ValidationConfigError(f"{where}: 'env' applies to exec gates only")
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
    env = _parse_env(where, item.get("env", {}))
    return ExecGate(name=name, argv=tuple(argv), timeout_s=timeout_s, env=env)


def _parse_env(where: str, env: object) -> dict[str, str]:
    if not isinstance(env, dict) or not all(
        isinstance(key, str) and isinstance(val, str) for key, val in env.items()
    ):
        raise ValidationConfigError(f"{where}.env must be an object of string to string")
    overridden = sorted(INJECTED_VARS & set(env))
    if overridden:
        raise ValidationConfigError(
            f"{where}.env may not set {', '.join(overridden)}: the worker sets them"
        )
    return dict(env)


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
        return ExecGate(name=shlex.join(argv), argv=tuple(argv))
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
    if isinstance(gate, ExecGate):
        return ExecGate(name=name, argv=gate.argv, timeout_s=gate.timeout_s, env=gate.env)
    return UrlGate(name=name, url=gate.url, timeout_s=gate.timeout_s)


def _check_url(where: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationConfigError(f"{where}: {url!r} is not an http(s) URL with a host")
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


def _parse_overall_timeout(value: str) -> float | None:
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise ValidationConfigError(
            f"{TIMEOUT_VAR} must be a number of seconds, got {value!r}"
        ) from None
    return _positive_seconds(TIMEOUT_VAR, seconds)
