"""Install shakedown's registration hold, then import the stock Dynamo 1.6.1 backend entry
modules and print, as JSON, which registration names each one bound and whether each is the
hold's patch.

usage: python stock_imports.py DYNAMO_SITE BACKEND_DEPS_DIR

Only the GPU engines (vllm, sglang, tensorrt_llm) and their tensor stack (torch,
transformers) are absent on this machine; they are stubbed here, everything else the
modules import is real (the Dynamo venv's packages, then tools/dynamo_backend_deps.sh's).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import site
import sys
import types
from typing import Any

site.addsitedir(sys.argv[1])
sys.path.append(sys.argv[2])

ENGINES = ("vllm", "sglang", "tensorrt_llm", "torch", "transformers")
MODULES = (
    "dynamo.vllm.main",
    "dynamo.vllm.worker_factory",
    "dynamo.vllm.handlers",
    "dynamo.sglang.register",
    "dynamo.sglang.request_handlers.handler_base",
    "dynamo.trtllm.workers.llm_worker",
    "dynamo.llm",
    "dynamo.llm._unary",
)
NAMES = ("register_model", "register_llm", "unregister_model", "unregister_llm")


class Opaque(type):
    """Any class, function or value of an absent engine: attributes, calls, subscripts and
    subclassing give more of the same; pydantic accepts it as any value."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Opaque(name, (), {"__module__": cls.__module__})

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # a decorator
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __iter__(cls) -> Any:
        return iter(())

    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()


class EngineModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = Opaque(name, (), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class AbsentEngines(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] in ENGINES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return EngineModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def main() -> None:
    from shakedown.integrations.dynamo_run import RegistrationHold
    from shakedown.validation import ValidationConfig, WorkerValidation

    config = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:true"})
    hold = RegistrationHold(WorkerValidation(config))
    hold.install()
    sys.meta_path.insert(0, AbsentEngines())
    patches = hold.patches
    out: dict[str, dict[str, bool]] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        out[name] = {n: getattr(module, n) is patches[n] for n in NAMES if hasattr(module, n)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
