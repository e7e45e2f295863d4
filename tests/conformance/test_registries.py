"""Coverage: every tool-call and reasoning parser name NVIDIA Dynamo 1.6.1, vLLM 0.34.0 and
SGLang 0.5.23 register, read from their own registries, resolves in `shakedown.parsers`
(as a family or one of its aliases).

Dynamo's names come from `dynamo._core` in the Dynamo venv (tools/dynamo_venv.sh), vLLM's and
SGLang's from their registries in the peers' venv (tools/peers_venv.sh, through the
conformance driver). A server whose venv cannot be built is skipped, with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import peers

from shakedown.parsers import reasoning_parsers, tool_call_parsers

KINDS = {"tool": tool_call_parsers, "reasoning": reasoning_parsers}


def ours(kind: str) -> set[str]:
    return {
        name.lower() for family, aliases in KINDS[kind]().items() for name in (family, *aliases)
    }


def dynamo_names() -> dict[str, list[str]]:
    from parity import stack  # tests/parity (on the path through peers)

    try:
        python = stack.dynamo_python()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"the Dynamo venv could not be built: {exc.stderr.strip()[-400:]}")
    code = (
        "import json; from dynamo._core import get_reasoning_parser_names as r, "
        "get_tool_parser_names as t; print(json.dumps({'tool': t(), 'reasoning': r()}))"
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def peer_names() -> dict[str, dict[str, list[str]]]:
    try:
        driver = peers.Driver(peers.peer_python())
    except peers.PeersUnavailable as exc:
        pytest.skip(f"vLLM/SGLang parser sources could not be installed: {exc}")
    try:
        return dict(driver.ask({"registries": True}))
    finally:
        driver.close()


@pytest.fixture(scope="module")
def registries(peer_names: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    return {"dynamo": dynamo_names(), **peer_names}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("server", ["dynamo", "vllm", "sglang"])
@pytest.mark.parametrize("kind", ["tool", "reasoning"])
def test_every_registered_name_resolves(
    registries: dict[str, dict[str, list[str]]], server: str, kind: str
) -> None:
    names = registries[server][kind]
    assert len(names) >= 30, (server, kind, names)  # the registry was really read
    missing = sorted(n for n in names if n.lower() not in ours(kind))
    assert missing == []
