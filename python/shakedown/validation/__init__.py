"""Worker validation gates: hold a worker until its checks pass against the loopback endpoint."""

from .config import (
    ExecGate,
    Gate,
    Hold,
    UrlGate,
    ValidationConfig,
    ValidationConfigError,
    default_gates,
    parse_gates,
)
from .health import HealthApp, HealthServer, health_response, live_response
from .lifecycle import EndpointFactory, ValidatedEndpoint, WorkerValidation
from .report import GateResult, ValidationReport

__all__ = [
    "EndpointFactory",
    "ExecGate",
    "Gate",
    "GateResult",
    "HealthApp",
    "HealthServer",
    "Hold",
    "UrlGate",
    "ValidatedEndpoint",
    "ValidationConfig",
    "ValidationConfigError",
    "ValidationReport",
    "WorkerValidation",
    "default_gates",
    "health_response",
    "live_response",
    "parse_gates",
]
