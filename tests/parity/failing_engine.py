"""An engine that fails on request, run unchanged behind both front ends: inside a Dynamo
Python worker (dynamo_worker.py) and as `shakedown serve --engine failing_engine:generate`.

It replies "<think>a</think>First turn.<EOS>" (DeepSeek ids); the annotation `fail_after:N`
makes it raise after N tokens (0: before the first one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

REPLY = [128821, 67, 128822, 10318, 2859, 16, 1]


def fail_after(request: dict[str, Any]) -> int | None:
    for annotation in request.get("annotations") or ():
        if isinstance(annotation, str) and annotation.startswith("fail_after:"):
            return int(annotation.split(":", 1)[1])
    return None


async def generate(request: dict[str, Any], context: Any = None) -> AsyncIterator[dict[str, Any]]:
    limit = fail_after(request)
    for position, token in enumerate(REPLY):
        if position == limit:
            raise RuntimeError(f"scripted engine failure after {position} tokens")
        yield {"token_ids": [token]}
    yield {"token_ids": [], "finish_reason": "stop"}
