"""A Dynamo Python worker gated by shakedown worker validation (issue 5's whole Dynamo flow).

The worker serves failing_engine.generate on the request plane and asks for its model
registration through `HeldRegistration`; worker validation starts the loopback, which drives
this worker's own endpoint over the request plane through `DynamoEngine`, runs the gates
from DYN_WORKER_VALIDATION_GATES, and only on success publishes the registration, after
which the Dynamo frontend lists and routes to the model.

usage: python validated_worker.py MODEL_DIR MODEL_NAME  (Dynamo's and shakedown's packages
both importable; the DYN_* env of stack.dynamo_env; prints RELEASED on release)
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
)

from shakedown.integrations.dynamo import DynamoEngine, HeldRegistration
from shakedown.validation import WorkerValidation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from failing_engine import generate


async def main(model_dir: str, name: str) -> None:
    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    path = f"{name}.backend.generate"
    endpoint = runtime.endpoint(path)
    serving = asyncio.ensure_future(endpoint.serve_endpoint(generate))
    config = ModelRuntimeConfig()
    config.reasoning_parser = "deepseek_r1"
    config.tool_call_parser = "hermes"
    held = HeldRegistration()
    await held.register_model(
        ModelInput.Tokens, ModelType.Chat | ModelType.Completions, endpoint, model_dir, name,
        worker_type=WorkerType.Aggregated, runtime_config=config,
    )  # fmt: skip
    validation = WorkerValidation.from_env()
    held.attach(validation)
    (registration,) = held.registrations()
    engine = DynamoEngine(path, runtime=runtime)
    validation.attach(registration.card(path), engine)
    print("HELD", flush=True)
    await validation.released()
    print("RELEASED", flush=True)
    await serving


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
