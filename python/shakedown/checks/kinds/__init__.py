"""The check kinds a suite can name: each parses its options and runs against a context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..options import parse_options
from . import accuracy, conformance, consistency, load, reasoning, structured_output, tool_calls

if TYPE_CHECKING:
    from ..context import RunContext
    from ..results import Verdict
    from ..suite import CheckSpec, Suite


@dataclass(frozen=True)
class Kind:
    parse: Callable[[dict[str, Any], str], Any]
    run: Callable[[RunContext, CheckSpec], Verdict]
    # Reads the check's case file when the suite loads, so a bad row fails before any request.
    load_cases: Callable[[Suite, CheckSpec, str], object] | None = None


def _parser(cls: type) -> Callable[[dict[str, Any], str], Any]:
    return partial(parse_options, cls)


KINDS: dict[str, Kind] = {
    "warmup": Kind(_parser(load.WarmupOptions), load.run_warmup),
    "conformance": Kind(_parser(conformance.Options), conformance.run),
    "consistency": Kind(_parser(consistency.Options), consistency.run),
    "reasoning": Kind(_parser(reasoning.Options), reasoning.run),
    "tool_calls": Kind(_parser(tool_calls.Options), tool_calls.run, tool_calls.load_cases),
    "structured_output": Kind(_parser(structured_output.Options), structured_output.run),
    "accuracy": Kind(accuracy.parse, accuracy.run, accuracy.load_rows),
    "latency": Kind(_parser(load.LatencyOptions), load.run_latency),
}
