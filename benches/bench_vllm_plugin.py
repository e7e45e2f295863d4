"""shakedown as vLLM's parser plugin against vLLM's own parsers, through the same interface.

Both run inside vLLM 0.34.0's serving-side code (tests/conformance/peer_driver.py): the parser
class `ParserManager.get_parser` composes, whole outputs through `Parser.parse`, streams through
`ChatStreamProcessor.step` one detokenized token per delta. One driver process has vLLM's
parsers, the other the same names taken over by `shakedown.integrations.vllm`. Each output is a
family's well-formed reply with a long content lead and two tool calls
(python/shakedown/parity/wellformed.py); times are best of 3.

    python benches/bench_vllm_plugin.py [--sentences 20 200]

Needs tools/peers_venv.sh (built on first use, cached) and tests/fixtures/model-deepseek.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "conformance"))

import peers

from shakedown.parity import wellformed

FAMILIES = (
    "hermes",
    "qwen3_coder",
    "kimi_k2",
    "deepseek_v3",
    "glm47",
    "minimax_m2",
    "gemma4",
    "deepseek_r1",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sentences", type=int, nargs="+", default=[20, 200], help="content lead lengths"
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    python = peers.peer_python()
    theirs, ours = peers.Driver(python), peers.Driver(python, plugin=True)
    print(
        "| family | output | chunks | vLLM stream µs/chunk | plugin stream µs/chunk | × | vLLM whole ms | plugin whole ms | × |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        for name in FAMILIES:
            fam = wellformed.family(name)
            assert fam.vllm is not None
            for sentences in args.sentences:
                text = wellformed.generate(fam, 0, long_content=sentences)
                request = {
                    "peer": "vllm", "reasoning": fam.vllm[0], "tool": fam.vllm[1], "text": text,
                    "tools": wellformed.TOOLS if fam.vllm[1] else [], "tokens": list(fam.tokens),
                    "repeat": args.repeat,
                }  # fmt: skip
                a, b = theirs.ask(request), ours.ask(request)
                n = a["chunks"]
                print(
                    f"| {name} | {len(text.encode()) / 1024:.1f} KB | {n} | {a['stream'] / n * 1e6:.1f} | "
                    f"{b['stream'] / n * 1e6:.1f} | {a['stream'] / b['stream']:.1f} | {a['whole'] * 1e3:.2f} | "
                    f"{b['whole'] * 1e3:.2f} | {a['whole'] / b['whole']:.1f} |",
                    flush=True,
                )
    finally:
        theirs.close()
        ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
