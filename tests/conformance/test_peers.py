"""The conformance stage: shakedown against vLLM 0.34.0's and SGLang 0.5.23's own parsers.

Skips (with the reason) only when the peers' parser sources cannot be installed; once they are,
every case pinned as passing in expected.json must still pass, and shakedown loaded into vLLM as
its parser plugin must answer as shakedown does. Refresh the pins and the report in
docs/parsers.md with `python tests/conformance/peers.py --write`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import peers

from shakedown.parity import wellformed


@pytest.fixture(scope="module")
def report() -> dict[str, dict[str, peers.Verdicts]]:
    if not peers.TOKENIZER.exists():
        pytest.skip("tests/fixtures/model-deepseek is not built (tests/fixtures/build_model.py)")
    try:
        python = peers.peer_python()
    except peers.PeersUnavailable as exc:
        pytest.skip(f"vLLM/SGLang parser sources could not be installed: {exc}")
    return peers.run(wellformed.FAMILIES, python)


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return dict(json.loads(peers.EXPECTED.read_text()))


@pytest.mark.timeout(900)
def test_no_pinned_agreement_is_lost(
    report: dict[str, dict[str, peers.Verdicts]], expected: dict[str, Any]
) -> None:
    assert peers.regressions(report, expected) == []


def test_every_family_meets_every_peer_that_has_it(
    report: dict[str, dict[str, peers.Verdicts]],
) -> None:
    for fam in wellformed.FAMILIES:
        for peer in ("vllm", "sglang"):
            if getattr(fam, peer) is not None:
                assert len(report[fam.name][peer].cases) == len(peers.SEEDS), (fam.name, peer)


def test_plugin_answers_as_shakedown(
    report: dict[str, dict[str, peers.Verdicts]], expected: dict[str, Any]
) -> None:
    """Through vLLM's serving-side Parser the plugin answers as shakedown does, except where
    vLLM's composition itself decides (pinned; docs/parsers.md says which)."""

    def deviations(pins: dict[str, Any]) -> dict[tuple[str, str, str], str]:
        return {
            (fam, seed, mode): verdict
            for fam, by_peer in pins.items()
            for seed, modes in by_peer.get("plugin", {}).items()
            for mode, verdict in modes.items()
            if verdict != "pass"
        }

    assert deviations(peers.pinned(report)) == deviations(expected)


def test_peer_bugs_are_pinned(
    report: dict[str, dict[str, peers.Verdicts]], expected: dict[str, Any]
) -> None:
    """The peers are pinned releases: the cases where they contradict themselves, crash or hang
    are facts of those releases (and of the driver's calling sequence), so they must not move."""

    def bugs(pins: dict[str, Any]) -> set[tuple[str, str, str, str]]:
        return {
            (fam, peer, seed, mode)
            for fam, by_peer in pins.items()
            for peer, cases in by_peer.items()
            for seed, modes in cases.items()
            for mode, verdict in modes.items()
            if verdict.startswith("peer bug")
        }

    assert bugs(peers.pinned(report)) == bugs(expected)


def test_a_wrong_answer_is_caught() -> None:
    """The judge itself: a shakedown answer that differs from an agreeing peer is a difference,
    and a peer whose stream contradicts its whole answer is the peer's bug, where shakedown
    sides with one of the two."""
    same = {"content": "a", "reasoning": "", "calls": [["f", '{"x": 1}']]}
    other = {"content": "a", "reasoning": "", "calls": [["f", '{"x": 2}']]}
    n = peers.normal
    assert peers.judge({"whole": same, "stream": same}, n(other), n(other)) == {
        "whole": "calls",
        "stream": "calls",
    }
    assert peers.judge({"whole": same, "stream": other}, n(same), n(same)) == {
        "whole": "pass",
        "stream": "peer bug: stream disagrees with its own whole",
    }
    assert peers.judge(
        {"whole": {"error": "crash: KeyError"}, "stream": same}, n(same), n(same)
    ) == {
        "whole": "peer bug: crash",
        "stream": "pass",
    }
    # A stream that loses a call its whole answer has (its text leaking into content), and a
    # whole answer that strips the content its stream keeps: both the peer's, though
    # shakedown matches neither mode exactly.
    ours = {"content": "a\n", "reasoning": "", "calls": [["f", "{}"], ["g", "{}"]]}
    whole = {**ours, "content": "a"}
    lost = {**ours, "content": 'a\n, {"name": "g"}', "calls": [["f", "{}"]]}
    assert peers.judge({"whole": whole, "stream": lost}, n(ours), n(ours)) == {
        "whole": "peer bug: whole whitespace disagrees with its own stream",
        "stream": "peer bug: stream calls disagree with its own whole",
    }
    # A peer contradicting itself excuses nothing where shakedown has calls of its own.
    mine = {**ours, "calls": [["f", '{"x": 1}']]}
    assert peers.judge({"whole": whole, "stream": lost}, n(mine), n(mine)) == {
        "whole": "calls+content-ws",
        "stream": "calls+content",
    }
