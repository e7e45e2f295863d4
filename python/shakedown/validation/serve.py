"""The gated flow of ``shakedown serve``: endpoint, gates, report, release (or hold).

``cli.py`` owns the command; it calls :func:`add_gate_arguments` on its ``serve`` parser,
:func:`validation_from_args` once arguments are parsed, and :func:`run_validated` with the
card, engine and pipeline it built (the endpoint serves through that same pipeline).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from .config import GATES_VAR, Hold, ValidationConfig, default_gates, parse_gates
from .health import HealthServer
from .lifecycle import EndpointFactory, WorkerValidation, loopback_endpoint

_DEFAULT_GATE = "\0default"


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("validation gates")
    group.add_argument(
        "--gates",
        nargs="?",
        const=_DEFAULT_GATE,
        metavar="GATES",
        help=f"validate before release; GATES as in ${GATES_VAR} (default: ${GATES_VAR}); "
        "--gates alone runs the reference check runner",
    )
    group.add_argument("--hold", choices=[h.value for h in Hold], help="card or health")
    group.add_argument("--parallel", action="store_true", default=None, help="run gates at once")
    group.add_argument("--report", type=Path, help="JSON report path (JUnit XML beside it)")
    group.add_argument("--validation-timeout", type=float, help="overall deadline, seconds")
    group.add_argument("--health-port", type=int, help="serve /live and /health on this port")
    group.add_argument("--health-host", default="127.0.0.1", help="host for --health-port")


def validation_from_args(
    args: argparse.Namespace,
    environ: Mapping[str, str] | None = None,
    *,
    endpoint_factory: EndpointFactory = loopback_endpoint,
) -> WorkerValidation:
    """The environment's settings, overridden by the command line; raises
    ``ValidationConfigError`` on a malformed value."""
    config = ValidationConfig.from_env(os.environ if environ is None else environ)
    changes: dict[str, Any] = {}
    if args.gates == _DEFAULT_GATE:
        changes["gates"] = default_gates()
    elif args.gates is not None:
        changes["gates"] = parse_gates(args.gates)
    if args.hold is not None:
        changes["hold"] = Hold(args.hold)
    if args.parallel:
        changes["parallel"] = True
    if args.report is not None:
        changes["report_path"] = args.report
    if args.validation_timeout is not None:
        changes["timeout_s"] = args.validation_timeout
    return WorkerValidation(
        dataclasses.replace(config, **changes), endpoint_factory=endpoint_factory
    )


def run_validated(
    validation: WorkerValidation,
    card: Any,
    engine: Any,
    *,
    stop: threading.Event,
    pipeline: Any = None,
    health_port: int | None = None,
    health_host: str = "127.0.0.1",
    out: TextIO | None = None,
) -> int:
    """Attach, run the gates and print the report. Released: 0 at once (the endpoint has closed).
    Held: the endpoint stays up for debugging until ``stop`` is set, then 1."""
    if not validation.enabled:
        raise ValueError("run_validated needs gates; with validation off, serve as usual")
    out = out or sys.stdout
    health = None
    if health_port is not None:
        health = HealthServer(validation, host=health_host, port=health_port)
        health.start()
        print(f"HEALTH_URL=http://{health_host}:{health.port}/health", file=out, flush=True)
    try:
        endpoint = validation.attach(card, engine, pipeline=pipeline)
        if endpoint is None:
            print(f"shakedown serve: held: {validation.reason}", file=sys.stderr)
            return 1
        print(f"OPENAI_BASE_URL=http://127.0.0.1:{endpoint.port}/v1", file=out, flush=True)
        report = None
        while report is None and not stop.is_set():
            report = validation.wait_finished(0.2)
        if report is None:
            return 1
        if validation.config.report_path is None:
            out.write(report.to_json().decode() + "\n")
        print(f"worker validation {report.status}: {report.reason}", file=out, flush=True)
        if report.status == "released":
            return 0
        print("held: the endpoint stays up for debugging; Ctrl-C to stop", file=out, flush=True)
        stop.wait()
        return 1
    finally:
        validation.close()
        if health is not None:
            health.stop()
