"""shakedown: hold an LLM worker until it proves itself.

A loopback OpenAI endpoint that runs the frontend's exact pipeline, validation
gates that run against it, and fast streaming reasoning and tool-call parsers.
"""

from shakedown._core import (
    ModelError,
    RequestError,
    ShakedownError,
    UnknownParserError,
    __version__,
)

__all__ = [
    "ModelError",
    "RequestError",
    "ShakedownError",
    "UnknownParserError",
    "__version__",
]
