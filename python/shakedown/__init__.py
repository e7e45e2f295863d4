"""shakedown: hold an LLM worker until it proves itself.

A loopback OpenAI endpoint that runs the frontend's exact pipeline, validation
gates that run against it, and fast streaming reasoning and tool-call parsers.
"""

from shakedown._core import (
    InvalidToolsError,
    ModelError,
    Pipeline,
    RequestError,
    ShakedownError,
    UnknownParserError,
    __version__,
)
from shakedown.endpoint import EngineRegistry, LocalEndpoint, ModelCard, RequestContext, attach
from shakedown.validation import (
    HealthApp,
    HealthServer,
    Hold,
    ValidationConfig,
    ValidationConfigError,
    WorkerValidation,
    health_response,
    live_response,
)

__all__ = [
    "EngineRegistry",
    "HealthApp",
    "HealthServer",
    "Hold",
    "InvalidToolsError",
    "LocalEndpoint",
    "ModelCard",
    "ModelError",
    "Pipeline",
    "RequestContext",
    "RequestError",
    "ShakedownError",
    "UnknownParserError",
    "ValidationConfig",
    "ValidationConfigError",
    "WorkerValidation",
    "__version__",
    "attach",
    "health_response",
    "live_response",
]
