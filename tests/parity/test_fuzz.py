"""The differential fuzzer (shakedown.parity.fuzz) against the live Dynamo 1.6.1 frontend.

- the CI fuzz stage: a fixed seed, `CASES` generated outputs per parser pair, each replayed
  to the reference (Dynamo frontend + mocker) and to shakedown's loopback (its own mocker),
  unary and streaming, with zero differences allowed;
- the fuzz corpus against the reference itself (the comparison is deterministic);
- the golden fixtures the fuzzer printed (tests/fixtures/pipeline/fuzz/), replayed through
  the Python binding exactly as `cargo test --test pipeline_fuzz` does through the core;
- the generator, the difference classes and the shrinker on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from shakedown._core import Pipeline
from shakedown.cli import main as cli_main
from shakedown.engines.mocker import Mocker, replay_key
from shakedown.parity import fuzz
from shakedown.parity.cases import Request
from shakedown.parity.client import Response
from shakedown.parity.grammar import TOOL_FORMATS, Pair, generate, make_call
from shakedown.parity.normalize import mask_generated
from shakedown.parity.runner import Outcome

from . import stack

SEED = 20261203
CASES = 300
GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "pipeline" / "fuzz"
# Pairs with differences the fuzzer found and that are not fixed yet (docs/parity.md
# lists them). Strict: a pair that starts passing must come off this list.
OPEN: dict[str, str] = {}


def _pairs() -> Iterator[Any]:
    for name in fuzz.PAIRS:
        marks = [pytest.mark.xfail(strict=True, reason=OPEN[name])] if name in OPEN else []
        yield pytest.param(name, marks=marks, id=name)


StackFor = Callable[[Pair], fuzz.FuzzStack]


@pytest.fixture()
def fuzz_stack(
    dynamo_python: Path, model_dir: Path, harmony_vocab: Path, tmp_path: Path
) -> Iterator[StackFor]:
    """Makes the live stacks for a pair; all of them are stopped after the test."""
    stacks: list[fuzz.FuzzStack] = []

    def make(pair: Pair) -> fuzz.FuzzStack:
        work = tmp_path / pair.name
        made = fuzz.FuzzStack(pair, dynamo_python, model_dir, work, harmony_vocab=harmony_vocab)
        stacks.append(made)
        return made

    yield make
    for made in stacks:
        made.stop()


def _explain(fuzz_stack: fuzz.FuzzStack, report: fuzz.PairReport) -> str:
    lines = [f"{len(report.findings)} of {report.cases} cases differ:"]
    lines += [f"  {n:4d}  {cls}" for cls, n in report.classes.most_common()]
    if fuzz_stack.pair.name in OPEN:
        return "\n".join(lines)  # known; shrinking would only cost time
    chosen = fuzz.one_per_class(report.findings)[:2]
    fuzz.shrink(fuzz_stack, chosen, max_rounds=15)
    for finding in chosen:
        lines.append(f"=== {finding.case.describe()}")
        lines += [f"--- {o.request.mode}\n{o.error or o.diff}" for o in finding.differing]
        golden = fuzz.golden(finding, fuzz_stack.pair, fuzz_stack.tokenize)
        lines.append(json.dumps(golden, ensure_ascii=False))
    return "\n".join(lines)


@pytest.mark.parametrize("pair_name", list(_pairs()))
def test_fuzz_stage(pair_name: str, fuzz_stack: StackFor) -> None:
    """The CI stage: every generated output answers byte-identically, unary and streaming."""
    made = fuzz_stack(fuzz.PAIRS[pair_name])
    report = fuzz.fuzz_pair(made, SEED, CASES)
    assert report.requests == 2 * CASES
    if report.findings:
        pytest.fail(_explain(made, report), pytrace=False)


def test_the_stage_fails_with_one_parser_rule_off(fuzz_stack: StackFor) -> None:
    """The mutation check: the loopback runs deepseek_r1 without its forced start (the
    `basic` parser is the same `<think>` parser minus that one rule). The CI corpus must
    catch it, and the shrinker must bring it down to a few characters."""
    made = fuzz_stack(fuzz.PAIRS["deepseek_r1+hermes"])
    made.loopback_pair = Pair("basic", "hermes")
    report = fuzz.fuzz_pair(made, SEED, CASES)
    assert len(report.findings) > CASES // 4, report.classes
    assert any("reasoning_content" in c for c in report.classes)
    # The first case the mutation changed (others may differ for open classes too).
    first = [f for f in report.findings if any("reasoning_content" in c for c in f.classes)][:1]
    fuzz.shrink(made, first, max_rounds=6)
    assert len(first[0].case.text) <= 8, first[0].case.describe()


def test_reference_answers_the_corpus_deterministically(fuzz_stack: StackFor) -> None:
    """The reference against itself: the masking hides every per-run value."""
    made = fuzz_stack(fuzz.PAIRS["deepseek_r1+hermes"])
    report = fuzz.fuzz_pair(made, SEED, 100, against_itself=True)
    assert not report.findings, [f.classes for f in report.findings]


def test_the_exported_corpus_runs_through_shakedown_parity(
    fuzz_stack: StackFor, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--export` writes the trace the fuzzer replays and a case file with which
    `shakedown parity` finds exactly the cases the fuzzer finds."""
    pair = fuzz.PAIRS["deepseek_r1+hermes"]
    out = tmp_path / "corpus"
    argv = ["--model-dir", str(model_dir), "--pair", pair.name, "--cases", "60"]
    assert fuzz.main([*argv, "--seed", str(SEED), "--export", str(out)]) == 0
    made = fuzz_stack(pair)
    report = fuzz.fuzz_pair(made, SEED, 60)
    exported = out / "deepseek_r1_hermes"
    replayed = made.work_dir / f"trace-{made.loads}.jsonl"
    assert (exported / "trace.jsonl").read_bytes() == replayed.read_bytes()
    capsys.readouterr()

    code = cli_main(["parity", "--a", made.reference, "--b", made.shakedown, "-q",
                     "--model", stack.MODEL_NAME, "--cases", str(exported / "cases.jsonl")])  # fmt: skip
    printed = capsys.readouterr().out
    mismatched = set(re.findall(r"^=== MISMATCH (\S+) \[", printed, re.MULTILINE))
    assert mismatched == {f.case.name for f in report.findings}, printed[-2000:]
    assert code == (1 if report.findings else 0)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_every_process_the_fuzz_cli_started(
    dynamo_python: Path, model_dir: Path, harmony_vocab: Path, tmp_path: Path
) -> None:
    """Killed mid-run (as a CI timeout or `kill` does), the CLI still stops the Dynamo
    frontend, the mocker and `shakedown serve`, each with its process group."""
    argv = [sys.executable, "-m", "shakedown.parity.fuzz", "--dynamo-python", str(dynamo_python),
            "--harmony-vocab", str(harmony_vocab), "--model-dir", str(model_dir),
            "--pair", "none+default", "--cases", "3000", "--shrink", "0",
            "--work-dir", str(tmp_path)]  # fmt: skip
    cli = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    groups: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(groups) < 3 and cli.poll() is None and time.monotonic() < deadline:
            groups = _children(cli.pid)  # each child leads its own process group
            time.sleep(0.2)
        assert len(groups) == 3, f"started {groups}, exit code {cli.poll()}"
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(60) == 128 + signal.SIGTERM
        alive = [g for g in groups if _group_alive(g)]
        assert alive == [], [Path(f"/proc/{g}/cmdline").read_bytes() for g in alive]
    finally:
        cli.kill()
        cli.wait()
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------- golden fixtures


def _golden_files() -> list[Path]:
    return sorted(GOLDEN.glob("*.json"))


def _replay(pipeline: Pipeline, path: str, body: dict[str, Any], ids: list[int]) -> Response:
    raw = json.dumps(body, ensure_ascii=False).encode()
    call = pipeline.chat if path == "/v1/chat/completions" else pipeline.completions
    exchange = call(raw, "00000000-0000-4000-8000-000000000000")
    request = json.loads(exchange.engine_request)
    session = (replay_key(request) or "golden:0").rpartition(":")[0]
    mocker = Mocker(replay={session: [ids]})

    class Running:
        def is_stopped(self) -> bool:
            return False

    async def frames() -> list[bytes]:
        return [orjson.dumps(f) async for f in mocker.generate(request, Running())]

    out = b""
    for frame in asyncio.run(frames()):
        out += exchange.feed(frame)
        if exchange.finished:
            break
    out += exchange.finish()
    content_type = "text/event-stream" if exchange.stream else "application/json"
    return Response(exchange.status, {"content-type": content_type}, out)


@pytest.mark.parametrize("file", _golden_files(), ids=lambda p: p.stem)
def test_golden_fixture_through_the_binding(file: Path, model_dir: Path) -> None:
    fixture = json.loads(file.read_text(encoding="utf-8"))
    assert fixture["name"] == file.stem and fixture["about"], "name and explain the class"
    pipeline = Pipeline(
        model_dir,
        served_name=stack.MODEL_NAME,
        reasoning_parser=fixture["reasoning_parser"],
        tool_call_parser=fixture["tool_call_parser"],
    )
    for mode in ("unary", "stream"):
        case = fixture[mode]
        got = _replay(pipeline, fixture["path"], case["body"], fixture["token_ids"])
        assert got.status == case["status"], mode
        assert mask_generated(got.body).decode() == case["expected"], mode


# ---------------------------------------------------------------- the fuzzer's parts


def _tokenize(text: str) -> list[int]:
    return list(text.encode())


def test_a_seed_names_each_case() -> None:
    pair = fuzz.PAIRS["deepseek_r1+hermes"]
    first = [fuzz.draw_case(pair, 7, i, _tokenize) for i in range(40)]
    again = [fuzz.draw_case(pair, 7, i, _tokenize) for i in range(40)]
    other = [fuzz.draw_case(pair, 8, i, _tokenize) for i in range(40)]
    assert first == again
    assert first != other
    # A case does not depend on how many were drawn before it.
    assert fuzz.draw_case(pair, 7, 39, _tokenize) == first[39]


@pytest.mark.parametrize("pair_name", list(fuzz.PAIRS))
def test_the_grammar_writes_what_the_issue_asks_for(pair_name: str) -> None:
    pair = fuzz.PAIRS[pair_name]
    outputs = [generate(pair, random.Random(i)) for i in range(400)]
    texts = ["".join(p for p in out if isinstance(p, str)) for out in outputs]
    joined = "\n".join(texts)
    fmt = pair.tool_format
    assert fmt is not None
    # Every marker of the family, whole, and some cut short.
    for marker in fmt.markers:
        assert marker in joined, marker
    assert any(marker[:-1] in t and marker not in t for marker in fmt.markers for t in texts)
    assert any(ch in joined for ch in ("世界", "👋", "ü"))
    assert "```json" in joined and '"arguments"' in joined
    assert any(isinstance(p, int) for out in outputs for p in out)
    if pair.reasoning:
        assert "</think>" in joined or "<|end|>" in joined


def test_every_tool_family_renders() -> None:
    calls = [make_call(random.Random(i), malformed_rate=0) for i in range(5)]
    for name, fmt in TOOL_FORMATS.items():
        text = "".join(p for p in fmt.render(random.Random(0), calls) if isinstance(p, str))
        assert calls[0].name in text, name


def test_token_boundaries_follow_the_split() -> None:
    case = fuzz.FuzzCase(name="x", pieces=("ab", 2, "cde"), eos=False)
    assert case.token_ids(_tokenize) == [97, 98, 2, 99, 100, 101]
    calls: list[str] = []

    def spy(text: str) -> list[int]:
        calls.append(text)
        return []

    fuzz.FuzzCase(name="x", pieces=("ab", "cde"), split=0).token_ids(spy)
    fuzz.FuzzCase(name="x", pieces=("ab", "cde"), split=-1).token_ids(spy)
    fuzz.FuzzCase(name="x", pieces=("ab", "cde"), split=2).token_ids(spy)
    assert calls == ["abcde", "ab", "cde", "ab", "cd", "e"]
    assert fuzz.FuzzCase(name="x", pieces=("a",)).token_ids(_tokenize)[-1] == fuzz.EOS_ID


def _outcome(mode: str, a: bytes, b: bytes) -> Outcome:
    ctype = "text/event-stream" if mode == "stream" else "application/json"
    request = Request(fuzz.FuzzCase(name="x", pieces=()).case("s"), mode, "POST", "/", {}, b"{}")
    ra = Response(200, {"content-type": ctype}, a)
    rb = Response(200, {"content-type": ctype}, b)
    return Outcome(request, ra, rb, "" if a == b else "differs")


def test_difference_classes_name_the_field() -> None:
    base = {"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": 1}}
    other = {"choices": [{"message": {"content": "x", "reasoning_content": None}}]}
    other["usage"] = {"completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 0}}
    cls = fuzz.difference_class(
        _outcome("unary", json.dumps(base).encode(), json.dumps(other).encode())
    )
    assert cls == "unary:completion_tokens_details,reasoning_content"
    a = b'data: {"choices":[{"delta":{"content":"ab"}}]}\n\ndata: [DONE]\n\n'
    b = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"b"}}]}\n\ndata: [DONE]\n\n'
    )
    assert fuzz.difference_class(_outcome("stream", a, b)) == "stream:chunking"
    c = b'data: {"choices":[{"delta":{"reasoning_content":"ab"}}]}\n\ndata: [DONE]\n\n'
    assert fuzz.difference_class(_outcome("stream", a, c)) == "stream:content,reasoning_content"
    assert fuzz.difference_class(_outcome("unary", b'{"a":1,"b":2}', b'{"b":2,"a":1}')) == (
        "unary:bytes"
    )


def test_candidates_only_simplify() -> None:
    case = fuzz.FuzzCase(
        name="x",
        pieces=("<think>", "ab", 2, "</think>"),
        split=2,
        eos=False,
        tools=True,
        tool_choice="required",
        stop=("b",),
        include_usage=True,
        max_tokens=3,
    )
    size = len(case.text)
    seen = list(fuzz.candidates(case))
    assert seen and case not in seen
    for candidate in seen:
        assert len(candidate.text) <= size and len(candidate.pieces) <= len(case.pieces)
    assert fuzz.FuzzCase(name="x", pieces=("a",)) not in seen  # one step at a time
    assert not list(fuzz.candidates(fuzz.FuzzCase(name="x", pieces=("a",))))
