"""`python -m dynamo.mocker` with the worker's parsers set on its model card.

Run by the Dynamo 1.6.1 venv's interpreter (see `stack.start_dynamo_mocker`), never
imported by shakedown. The 1.6.1 mocker has no --dyn-tool-call-parser /
--dyn-reasoning-parser flags, and the frontend takes the parsers from the card's
runtime_config, so this wraps the mocker's `build_runtime_config` to set them. All
other arguments pass through to the mocker.

env: PARITY_TOOL_CALL_PARSER (default hermes), PARITY_REASONING_PARSER (default deepseek_r1);
an empty value leaves that parser off.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import dynamo.mocker.main as mocker_main  # type: ignore[import-not-found]

_build = mocker_main.build_runtime_config
TOOL = os.environ.get("PARITY_TOOL_CALL_PARSER", "hermes") or None
REASONING = os.environ.get("PARITY_REASONING_PARSER", "deepseek_r1") or None


def build_runtime_config(engine_args: Any) -> Any:
    block_size, config = _build(engine_args)
    if TOOL:
        config.tool_call_parser = TOOL
    if REASONING:
        config.reasoning_parser = REASONING
    return block_size, config


mocker_main.build_runtime_config = build_runtime_config

if __name__ == "__main__":
    sys.argv[0] = "dynamo.mocker"
    mocker_main.main()
