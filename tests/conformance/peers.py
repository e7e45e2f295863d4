"""Conformance against vLLM 0.34.0 and SGLang 0.5.23: the same well-formed outputs per family
(python/shakedown/parity/wellformed.py) through their own parsers and through shakedown's,
whole and streamed one token per delta, compared on calls (name + parsed arguments), content
and reasoning. A peer that disagrees with itself (its stream against its whole result), crashes
or hangs is not held against shakedown: that case is listed as the peer's bug.

    python tests/conformance/peers.py            # run, print the table
    python tests/conformance/peers.py --write    # also pin the verdicts (expected.json) and
                                                 # rewrite the report in docs/parsers.md

The peers run in their own process (tools/peers_venv.sh's python, tests/conformance/
peer_driver.py); shakedown runs here. A second driver process loads shakedown into vLLM as its
parser plugin and must answer exactly as shakedown does here.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import shakedown
from shakedown.parity import wellformed
from shakedown.parity.stack import HARMONY_VOCAB_VAR
from shakedown.parity.wellformed import Family
from shakedown.parsers import ChatParser, parse

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from parity import stack as parity_stack  # noqa: E402  (tests/parity: the checkout's tools)

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected.json"
DOC = ROOT / "docs" / "parsers.md"
TOKENIZER = ROOT / "tests" / "fixtures" / "model-deepseek" / "tokenizer.json"
SEEDS = range(20)
PEERS = ("vllm", "sglang")
# The driver bounds each call at 20 s; this bounds a whole answer (both modes + tokenizing).
ANSWER_SECONDS = 60.0
VENV_SECONDS = 900.0


class PeersUnavailable(RuntimeError):
    """The peers' parser sources could not be installed (no registry, no disk, ...)."""


def peer_python() -> str:
    """The python of the peers' venv, building it (cached) if needed."""
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "tools" / "peers_venv.sh")],
            capture_output=True, text=True, timeout=VENV_SECONDS, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise PeersUnavailable(f"tools/peers_venv.sh ran over {VENV_SECONDS:.0f} s") from exc
    if done.returncode != 0:
        raise PeersUnavailable(f"tools/peers_venv.sh failed: {done.stderr.strip()[-600:]}")
    return done.stdout.strip().splitlines()[-1]


def harmony_vocab() -> str:
    """The directory holding the Harmony encoding's vocab (tools/o200k_base.sh), for the
    peers' gpt-oss parsers."""
    try:
        return str(parity_stack.harmony_vocab())
    except subprocess.CalledProcessError as exc:
        raise PeersUnavailable(f"tools/o200k_base.sh failed: {exc.stderr.strip()[-600:]}") from exc


def dialects() -> bool:
    """Whether this shakedown has parser dialects (issue 13 item 4)."""
    try:
        parse("", tool_call="hermes", **{"dialect": "vllm"})
    except TypeError:
        return False
    return True


class Driver:
    """One peer driver process; answers are bounded, a silent driver is killed and restarted."""

    def __init__(self, python: str, plugin: bool = False) -> None:
        self.argv = [python, str(HERE / "peer_driver.py"), "--tokenizer", str(TOKENIZER)]
        if plugin:
            self.argv += ["--plugin", str(Path(shakedown.__file__).parent.parent)]
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
            HARMONY_VOCAB_VAR: harmony_vocab(),
        }
        proc = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, encoding="utf-8", env=env,
        )  # fmt: skip
        ready = self._read(proc, 120.0)
        if ready is None or not ready.get("ready"):
            proc.kill()
            proc.wait()
            raise PeersUnavailable("the peer driver did not start (imports failed?)")
        return proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], seconds: float) -> dict[str, Any] | None:
        assert proc.stdout is not None
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                line = proc.stdout.readline()
                return json.loads(line) if line else None
        return None

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        answer = self._read(self.proc, ANSWER_SECONDS)
        if answer is None:
            self.close()
            hang = {"error": f"hang: no answer within {ANSWER_SECONDS:.0f} s"}
            return {"whole": hang, "stream": hang, "deltas": None}
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def ours(fam: Family, dialect: str | None, text: str, deltas: list[str] | None) -> dict[str, Any]:
    """shakedown's answer, whole (deltas None) or fed the peer's deltas. In a peer's dialect
    the parsers are asked for by the peer's own names (a server may run different code
    under two names of one family: SGLang's `qwen25` and `hermes`)."""
    peer_names = getattr(fam, dialect) if dialect in PEERS else None
    reasoning, tool = peer_names or fam.ours
    options: dict[str, Any] = {"reasoning": reasoning, "tool_call": tool}
    if tool:
        options["tools"] = wellformed.TOOLS
    if dialect:
        options["dialect"] = dialect
    if fam.response_template is not None:
        options["response_template"] = fam.response_template
    if deltas is None:
        msg = parse(text, **options)
        calls = [[c.name, c.arguments] for c in msg.tool_calls]
        return {
            "content": msg.content or "",
            "reasoning": msg.reasoning_content or "",
            "calls": calls,
        }
    parser = ChatParser(**options)
    content, thought, by_index = "", "", {}
    for delta in [parser.feed(d) for d in deltas] + [parser.finish()]:
        content += delta.content or ""
        thought += delta.reasoning_content or ""
        for call in delta.calls:
            entry = by_index.setdefault(call.index, ["", ""])
            entry[0] += call.name or ""
            entry[1] += call.arguments
    return {
        "content": content,
        "reasoning": thought,
        "calls": [by_index[i] for i in sorted(by_index)],
    }


def _args(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return ("unparsed", text)


def normal(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return result
    calls = [(name, _args(args)) for name, args in result["calls"]]
    return {"content": result["content"], "reasoning": result["reasoning"], "calls": calls}


def vllm_whole(result: dict[str, Any]) -> dict[str, Any]:
    """vLLM's `DelegatingParser.parse` turns whitespace-only content beside tool calls into
    none, in whole answers only (its stream keeps it)."""
    if result["calls"] and not result["content"].strip():
        return {**result, "content": ""}
    return result


def difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Which fields differ (None: none), whitespace-only content named apart."""
    if "error" in a or "error" in b:
        return "error"
    fields = []
    if a["calls"] != b["calls"]:
        fields.append("calls")
    if a["reasoning"] != b["reasoning"]:
        fields.append(
            "reasoning-ws" if a["reasoning"].strip() == b["reasoning"].strip() else "reasoning"
        )
    if a["content"] != b["content"]:
        fields.append("content-ws" if a["content"].strip() == b["content"].strip() else "content")
    return "+".join(fields) or None


@dataclass
class Verdicts:
    """One family against one peer (or the plugin): per seed, per mode, 'pass', a difference,
    or 'peer bug: ...'."""

    cases: dict[int, dict[str, str]] = field(default_factory=dict)
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)

    def count(self, mode: str) -> Counter[str]:
        return Counter(v[mode] for v in self.cases.values())


def self_contradiction(theirs: dict[str, Any], other: dict[str, Any], mine: dict[str, Any]) -> str:
    """Why one mode of a peer that contradicts its other mode is its own bug ("" if it is
    not): shakedown gives the other mode's answer; or shakedown has the other mode's calls,
    which this mode lost or added; or this mode differs from shakedown only by whitespace
    around content or reasoning, where it disagrees with its other mode too."""
    if "error" in other or not difference(theirs, other):
        return ""
    if not difference(other, mine):
        return "disagrees with its own"
    if theirs["calls"] != other["calls"] and other["calls"] == mine["calls"]:
        return "calls disagree with its own"
    if theirs["calls"] == mine["calls"] and all(
        theirs[f] == mine[f] or (theirs[f].strip() == mine[f].strip() and theirs[f] != other[f])
        for f in ("content", "reasoning")
    ):
        return "whitespace disagrees with its own"
    return ""


def judge(
    peer: dict[str, Any], whole_ours: dict[str, Any], stream_ours: dict[str, Any]
) -> dict[str, str]:
    pw, ps = normal(peer["whole"]), normal(peer["stream"])
    verdict: dict[str, str] = {}
    for mode, theirs, mine, other, other_mode in (
        ("whole", pw, whole_ours, ps, "stream"),
        ("stream", ps, stream_ours, pw, "whole"),
    ):
        if "error" in theirs:
            verdict[mode] = "peer bug: " + theirs["error"].split(":")[0]
        elif not (kind := difference(theirs, mine)):
            verdict[mode] = "pass"
        elif why := self_contradiction(theirs, other, mine):
            verdict[mode] = f"peer bug: {mode} {why} {other_mode}"
        else:
            verdict[mode] = kind
    return verdict


def run(
    families: tuple[Family, ...], python: str, seeds: range = SEEDS
) -> dict[str, dict[str, Verdicts]]:
    """Verdicts per family name, per peer ('vllm', 'sglang', 'plugin')."""
    use_dialects = dialects()
    drivers = {"peers": Driver(python), "plugin": Driver(python, plugin=True)}
    report: dict[str, dict[str, Verdicts]] = {}
    try:
        for fam in families:
            for peer in (*PEERS, "plugin"):
                names = getattr(fam, "vllm" if peer == "plugin" else peer)
                if names is None:
                    continue
                verdicts = report.setdefault(fam.name, {}).setdefault(peer, Verdicts())
                dialect = ("vllm" if peer == "plugin" else peer) if use_dialects else None
                for seed in seeds:
                    text = wellformed.generate(fam, seed)
                    request = {
                        "peer": "sglang" if peer == "sglang" else "vllm", "reasoning": names[0],
                        "tool": names[1], "text": text, "tools": wellformed.TOOLS if names[1] else [],
                        "tokens": list(fam.tokens), "vocab": fam.vocab,
                        "response_template": fam.response_template,
                    }  # fmt: skip
                    answer = drivers["plugin" if peer == "plugin" else "peers"].ask(request)
                    deltas = answer["deltas"] or [text]
                    text = "".join(deltas)
                    mine = (
                        normal(ours(fam, dialect, text, None)),
                        normal(ours(fam, dialect, text, deltas)),
                    )
                    if peer == "plugin":
                        # Through vLLM's interface shakedown must answer as it does here, but
                        # for the one rule vLLM's Parser.parse adds to whole answers.
                        expect = (vllm_whole(mine[0]), mine[1])
                        verdict = {
                            m: difference(normal(answer[m]), r) or "pass"
                            for m, r in zip(("whole", "stream"), expect)
                        }
                    else:
                        verdict = judge(answer, *mine)
                    verdicts.cases[seed] = verdict
                    for mode, v in verdict.items():
                        if v != "pass" and v not in verdicts.examples:
                            theirs = answer[mode]
                            verdicts.examples[v] = {"seed": seed, "mode": mode, "text": text, "peer": theirs,
                                                    "ours": mine[0] if mode == "whole" else mine[1]}  # fmt: skip
    finally:
        for driver in drivers.values():
            driver.close()
    return report


def pinned(report: dict[str, dict[str, Verdicts]]) -> dict[str, Any]:
    return {
        fam: {
            peer: {str(seed): v for seed, v in sorted(verdicts.cases.items())}
            for peer, verdicts in peers.items()
        }
        for fam, peers in report.items()
    }


def regressions(report: dict[str, dict[str, Verdicts]], expected: dict[str, Any]) -> list[str]:
    """Cases pinned as passing that no longer pass (improvements are not regressions)."""
    lost = []
    for fam, peers in pinned(report).items():
        for peer, cases in peers.items():
            for seed, verdict in cases.items():
                before = expected.get(fam, {}).get(peer, {}).get(seed)
                for mode in ("whole", "stream"):
                    if before and before[mode] == "pass" and verdict[mode] != "pass":
                        lost.append(f"{fam} vs {peer}, seed {seed}, {mode}: now {verdict[mode]}")
    return lost


def table(report: dict[str, dict[str, Verdicts]], dialect_note: str) -> str:
    lines = [
        "| family | peer | dialect | whole: pass | stream: pass | differences (whole / stream) | peer bugs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    totals: Counter[str] = Counter()
    for fam, peers in report.items():
        for peer, verdicts in peers.items():
            n = len(verdicts.cases)
            whole, stream = verdicts.count("whole"), verdicts.count("stream")
            diffs = []
            for mode_counts in (whole, stream):
                kinds = [
                    f"{k} {c}"
                    for k, c in sorted(mode_counts.items())
                    if k != "pass" and not k.startswith("peer bug")
                ]
                diffs.append(", ".join(kinds) or "—")
            bugs = sorted(
                {v for c in verdicts.cases.values() for v in c.values() if v.startswith("peer bug")}
            )
            bug_count = sum(
                1 for c in verdicts.cases.values() for v in c.values() if v.startswith("peer bug")
            )
            dialect = (
                ("vllm" if peer == "plugin" else peer) if dialect_note == "matching" else "dynamo"
            )
            label = (
                "vLLM + shakedown plugin"
                if peer == "plugin"
                else {"vllm": "vLLM", "sglang": "SGLang"}[peer]
            )
            lines.append(
                f"| {fam} | {label} | {dialect} | {whole['pass']}/{n} | {stream['pass']}/{n} | "
                f"{diffs[0]} / {diffs[1]} | {(bug_count and f'{bug_count}: ' + '; '.join(b[10:] for b in bugs)) or '—'} |"
            )
            totals[f"{peer} cases"] += 2 * n
            totals[f"{peer} pass"] += whole["pass"] + stream["pass"]
            totals[f"{peer} bugs"] += bug_count
    summary = ", ".join(
        f"{label}: {totals[p + ' pass']}/{totals[p + ' cases']} pass, {totals[p + ' bugs']} peer bugs"
        for p, label in (("vllm", "vLLM"), ("sglang", "SGLang"), ("plugin", "plugin"))
    )
    return "\n".join(lines) + f"\n\nCases × modes: {summary}.\n"


def _cases(
    report: dict[str, dict[str, Verdicts]],
) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for fam, peers in report.items():
        for peer, verdicts in peers.items():
            for kind, example in verdicts.examples.items():
                yield fam, peer, kind, example


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--write", action="store_true", help="pin the verdicts and rewrite the docs section"
    )
    ap.add_argument("--family", action="append", help="only these families")
    ap.add_argument("--examples", action="store_true", help="print one example per difference")
    args = ap.parse_args(argv)
    families = tuple(f for f in wellformed.FAMILIES if not args.family or f.name in args.family)
    started = time.monotonic()
    report = run(families, peer_python())
    note = "matching" if dialects() else "default"
    print(table(report, note))
    print(f"({time.monotonic() - started:.0f} s)")
    if args.examples:
        for fam, peer, kind, example in _cases(report):
            print(
                json.dumps(
                    {"family": fam, "peer": peer, "kind": kind, **example}, ensure_ascii=False
                )
            )
    if args.write:
        EXPECTED.write_text(json.dumps(pinned(report), indent=1, sort_keys=True) + "\n")
        doc = DOC.read_text()
        start, end = "<!-- conformance-table -->\n", "<!-- /conformance-table -->"
        if start in doc and end in doc:
            head, rest = doc.split(start, 1)
            DOC.write_text(head + start + table(report, note) + rest[rest.index(end) :])
    return 0


if __name__ == "__main__":
    sys.exit(main())
