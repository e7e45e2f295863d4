"""A plain Dynamo Python worker, unaware of validation: the packaged tiny model served by
shakedown's scripted mocker (reasoning, then a tool call) over the request plane, registered
with the stock `dynamo.llm.register_model`. test_run.py and benches/bench_run.py start it
under `shakedown run`.

usage: python tiny_worker.py MODEL_NAME [--several] [--graceful]
       (the DYN_* env of stack.dynamo_env)

--several registers, in this order: MODEL_NAME-embed (embedding only), MODEL_NAME,
MODEL_NAME-b, and MODEL_NAME-gone, which it then unregisters; each on its own endpoint.
--graceful installs Dynamo's own SIGTERM/SIGINT handling, as the stock backends do.
"""

from __future__ import annotations

import asyncio
import sys

from dynamo.common.utils.graceful_shutdown import install_signal_handlers
from dynamo.llm import (
    ModelInput,
    ModelRuntimeConfig,
    ModelType,
    WorkerType,
    register_model,
    unregister_model,
)
from dynamo.runtime import DistributedRuntime

from shakedown._core import Pipeline
from shakedown.cli import TINY_MODEL, TINY_PARSERS, make_mocker


async def main(name: str, several: bool, graceful: bool) -> None:
    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, "file", "tcp")
    engine = make_mocker(Pipeline(TINY_MODEL), TINY_MODEL).generate
    config = ModelRuntimeConfig()
    config.reasoning_parser, config.tool_call_parser = TINY_PARSERS
    chat = ModelType.Chat | ModelType.Completions
    models = [(name, "backend", chat)]
    if several:
        models = [(f"{name}-embed", "embed", ModelType.Embedding), *models,
                  (f"{name}-b", "second", chat), (f"{name}-gone", "gone", chat)]  # fmt: skip
    endpoints = {}
    for model, component, model_type in models:
        endpoint = runtime.endpoint(f"{name}.{component}.generate")
        endpoints[model] = endpoint
        await register_model(
            ModelInput.Tokens, model_type, endpoint, str(TINY_MODEL), model,
            worker_type=WorkerType.Aggregated, runtime_config=config,
        )  # fmt: skip
    if several:
        await unregister_model(endpoints.pop(f"{name}-gone"))
    if graceful:
        install_signal_handlers(loop, runtime, endpoints.values(), grace_period_s=0)
    await asyncio.gather(*(endpoint.serve_endpoint(engine) for endpoint in endpoints.values()))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--several" in sys.argv[2:], "--graceful" in sys.argv[2:]))
