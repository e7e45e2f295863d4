"""The loopback OpenAI endpoint: hosting, routes, engine registry and model cards."""

from .app import EndpointApp
from .cards import ModelCard, ineligibility, select_card
from .context import EngineContext, RequestContext
from .local import LocalEndpoint, attach, build_pipeline
from .registry import Engine, EngineRegistry, Registration
from .server import LoopbackServer, resolve_port

__all__ = [
    "EndpointApp",
    "Engine",
    "EngineContext",
    "EngineRegistry",
    "LocalEndpoint",
    "LoopbackServer",
    "ModelCard",
    "Registration",
    "RequestContext",
    "attach",
    "build_pipeline",
    "ineligibility",
    "resolve_port",
    "select_card",
]
