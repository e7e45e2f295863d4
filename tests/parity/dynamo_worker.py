"""A Dynamo Python worker serving failing_engine.generate behind the real Dynamo frontend.

usage: python dynamo_worker.py MODEL_DIR MODEL_NAME   (file discovery, tcp request plane,
the DYN_* env of stack.dynamo_env); endpoint `<MODEL_NAME>.backend.generate`.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from dynamo._core import (
    DistributedRuntime,
    ModelInput,
    ModelRuntimeConfig,
    ModelType,
    WorkerType,
    register_model,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from failing_engine import generate


async def main(model_dir: str, name: str) -> None:
    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    endpoint = runtime.endpoint(f"{name}.backend.generate")
    config = ModelRuntimeConfig()
    config.reasoning_parser = "deepseek_r1"
    config.tool_call_parser = "hermes"
    await register_model(
        ModelInput.Tokens, ModelType.Chat | ModelType.Completions, endpoint, model_dir, name,
        worker_type=WorkerType.Aggregated, runtime_config=config,
    )  # fmt: skip
    await endpoint.serve_endpoint(generate)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
