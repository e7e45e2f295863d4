"""Import shims that let vLLM's and SGLang's parser modules load without a GPU stack.

Runs only inside the peer driver's process (tests/conformance/peer_driver.py), never in the
test process. Each shim stands for a package the parsers' import path imports at module level
but never calls while parsing; no parsing logic is replaced, and `seal()` proves it: once the
parser modules are imported, any use of a shim raises `ShimUsed`, which the driver reports as a
crash of that case (none has happened).

The shimmed packages, and why each is a shim rather than the real package:

- ``torch``: vLLM 0.34's tool-parser modules import ``vllm.entrypoints...protocol`` ->
  ``vllm.config`` -> ``vllm.model_executor`` -> ``vllm.distributed``, which touch 31 torch
  submodules and ~120 attributes at import time (custom-op registration, dtype tables,
  annotations); SGLang's ``function_call_parser`` reaches torch through ``sglang.srt.utils``.
  The index this project can reach serves only torch's CUDA build (2.14.0: a 555 MB wheel,
  1.2 GB installed, ~30 s), and it does not import without its ~3 GB of nvidia-* CUDA
  libraries; the CPU build lives on an index CI cannot reach. Dtypes carry their real item
  sizes because vLLM checks them against ``array`` typecodes at import.
- ``triton``: SGLang's utilities import it at module level for GPU kernels.

Real packages used as they are (tools/peers_venv.sh pins them): pydantic, openai, regex,
partial-json-parser, tokenizers, transformers (pure Python; imported by the protocol modules),
numpy, msgspec, fastapi, xgrammar (without its torch/triton dependencies) and the rest.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

SHIMMED = ("torch", "triton")

_sealed = False

# torch dtypes with their real item sizes (vLLM asserts them against array typecodes).
_DTYPE_SIZES = {
    "float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4, "float64": 8,
    "double": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "int8": 1, "int16": 2,
    "int32": 4, "int": 4, "int64": 8, "long": 8, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1, "complex64": 8, "complex128": 16,
}  # fmt: skip


class ShimUsed(RuntimeError):
    """Parsing code reached a shimmed GPU package: the conformance result would be unsound."""


def _check(what: str) -> None:
    if _sealed:
        raise ShimUsed(f"parsing used the shim of {what}")


class _PlaceholderType(type):
    """Attribute access on a placeholder class gives another placeholder class, so
    annotations (``torch.Tensor | None``), base classes (``torch.nn.Module``) and
    decorators (``@torch.library.custom_op(...)``) evaluate at import time."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _check(f"{cls.__qualname__}.{attr}")
        child = _PlaceholderType(
            attr, (_Placeholder,), {"__qualname__": f"{cls.__qualname__}.{attr}"}
        )
        type.__setattr__(cls, attr, child)
        return child


class _Placeholder(metaclass=_PlaceholderType):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _check(type(self).__qualname__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _check(type(self).__qualname__ + "()")
        # A decorator factory's result applied to a function returns the function.
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Placeholder()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _check(attr)
        return _Placeholder()

    # Schema strings are built by concatenation at import (custom-op registration).
    def __add__(self, other: Any) -> Any:
        return other

    __radd__ = __add__

    def __str__(self) -> str:
        return ""

    def __iter__(self) -> Any:
        return iter(())

    def __bool__(self) -> bool:
        return False


class _Dtype:
    def __init__(self, name: str, itemsize: int) -> None:
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _check(f"{name}.{attr}")
        value = _PlaceholderType(attr, (_Placeholder,), {"__qualname__": f"{name}.{attr}"})
        setattr(module, attr, value)
        return value

    module.__getattr__ = missing  # type: ignore[method-assign]
    if name == "torch":
        module.__version__ = "2.14.0"  # vLLM 0.34.0's pin
        module.dtype = _Dtype  # type: ignore[attr-defined]
        for dtype, size in _DTYPE_SIZES.items():
            setattr(module, dtype, _Dtype(dtype, size))
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] in SHIMMED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Make the shimmed packages importable (before any peer module is imported)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def seal() -> None:
    """From now on any use of a shim raises `ShimUsed`."""
    global _sealed
    _sealed = True
