"""Differential fuzzing against the live reference: `python -m shakedown.parity.fuzz`.

For one reasoning + tool-call parser pair, draw model outputs from the seeded grammar
(`grammar.py`) and request variants around them (tools and `tool_choice`, stop strings,
`max_tokens` cuts, EOS or not, usage in the stream, chat or completions); write them as
one replay trace; start the real Dynamo 1.6.1 frontend + mocker and shakedown's loopback
+ mocker on that trace; compare every case unary and streaming with only ids and
`created` masked. Each difference is shrunk to a minimal reproducer (both mockers are
restarted on a trace of candidates per round) and printed as a golden fixture.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shakedown._core import Pipeline

from . import stack
from .cases import Case, parse_case, requests_for
from .client import parse_endpoint
from .grammar import TOOLS, WEATHER, Pair, Piece, generate
from .normalize import mask_generated, sse_events
from .runner import Outcome, compare

EOS_ID = 1
NO_CUT = 512
PAIRS: dict[str, Pair] = {
    p.name: p
    for p in (
        Pair("deepseek_r1", "hermes"),
        Pair("qwen3", "qwen3_coder"),
        Pair("kimi_k2", "kimi_k2"),
        Pair("gpt_oss", "harmony"),
        Pair("deepseek_v3_1", "deepseek_v3_1"),
        Pair(None, "mistral"),
        Pair(None, "llama3_json"),
        Pair(None, "pythonic"),
        Pair(None, "default"),
    )
}


def parse_pair(text: str) -> Pair:
    """`REASONING+TOOL`, `none` for an absent side; a tool name picks its own grammar."""
    if text in PAIRS:
        return PAIRS[text]
    reasoning, sep, tool = text.partition("+")
    if not sep:
        raise ValueError(f"{text!r}: expected REASONING+TOOL (`none` for no parser)")
    return Pair(None if reasoning == "none" else reasoning, None if tool == "none" else tool)


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class FuzzCase:
    """One model output plus the request around it."""

    name: str
    pieces: tuple[Piece, ...]
    # How the text becomes tokens: 0 the whole text at once, -1 each piece on its own,
    # k > 0 every k characters of a piece on their own (token boundaries the fuzzer picks).
    split: int = 0
    eos: bool = True
    surface: str = "chat"
    tools: bool = False
    tool_choice: Any = None
    max_tokens: int = NO_CUT
    stop: tuple[str, ...] = ()
    include_usage: bool = False

    @property
    def text(self) -> str:
        return "".join(p for p in self.pieces if isinstance(p, str))

    def token_ids(self, tokenize: Callable[[str], list[int]]) -> list[int]:
        ids: list[int] = []
        run: list[str] = []

        def flush() -> None:
            if run:
                ids.extend(tokenize("".join(run)))
                run.clear()

        for piece in self.pieces:
            if isinstance(piece, int):
                flush()
                ids.append(piece)
            elif self.split == 0:
                run.append(piece)
            elif self.split < 0:
                ids.extend(tokenize(piece))
            else:
                for at in range(0, len(piece), self.split):
                    ids.extend(tokenize(piece[at : at + self.split]))
        flush()
        return [*ids, EOS_ID] if self.eos else ids

    def body(self, session: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "$MODEL"}
        if self.surface == "chat":
            body["messages"] = [{"role": "user", "content": "Fuzz me."}]
        else:
            body["prompt"] = "Fuzz me."
        body["max_tokens"] = self.max_tokens
        if self.stop:
            body["stop"] = list(self.stop) if len(self.stop) > 1 else self.stop[0]
        if self.tools:
            body["tools"] = TOOLS
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        body["nvext"] = {"annotations": [f"output_replay_id:{session}:0"]}
        return body

    def case_line(self, session: str) -> dict[str, Any]:
        """The case as a line of a parity case file (`shakedown parity --cases`)."""
        line: dict[str, Any] = {"name": self.name}
        if self.surface != "chat":
            line["path"] = "/v1/completions"
        line["body"] = self.body(session)
        if self.include_usage:
            line["stream_extra"] = {"stream_options": {"include_usage": True}}
        return line

    def case(self, session: str) -> Case:
        return parse_case(self.case_line(session), self.name)

    def describe(self) -> str:
        knobs = [f"split={self.split}", f"eos={self.eos}", self.surface]
        if self.tools:
            knobs.append(f"tools tool_choice={json.dumps(self.tool_choice)}")
        if self.max_tokens != NO_CUT:
            knobs.append(f"max_tokens={self.max_tokens}")
        if self.stop:
            knobs.append(f"stop={list(self.stop)!r}")
        if self.include_usage:
            knobs.append("include_usage")
        return f"{list(self.pieces)!r}  [{' '.join(knobs)}]"


def draw_case(pair: Pair, seed: int, index: int, tokenize: Callable[[str], list[int]]) -> FuzzCase:
    """Case `index` of `seed` for `pair`: independent of how many cases are drawn."""
    rng = random.Random(f"{seed}/{pair.name}/{index}")
    pieces = tuple(generate(pair, rng))
    case = FuzzCase(
        name=f"{pair.name}#{seed}.{index}",
        pieces=pieces,
        split=rng.choices((0, -1, 1, 2, 3), (5, 3, 1, 1, 1))[0],
        eos=rng.random() < 0.8,
        surface="chat" if rng.random() < 0.92 else "completions",
        include_usage=rng.random() < 0.5,
    )
    if case.surface == "chat" and pair.tool and rng.random() < 0.8:
        choice = rng.choices(
            (None, "auto", "none", "required", {"type": "function", "function": {"name": WEATHER}}),
            (12, 2, 1, 1, 1),
        )[0]
        case = replace(case, tools=True, tool_choice=choice)
    if rng.random() < 0.12:
        text = case.text
        if text:
            at = rng.randrange(len(text))
            stops = [text[at : at + rng.randint(1, 5)]]
            if rng.random() < 0.3:
                at = rng.randrange(len(text))
                stops.append(text[at : at + rng.randint(1, 3)])
            case = replace(case, stop=tuple(dict.fromkeys(stops)))
    if rng.random() < 0.15:
        count = len(case.token_ids(tokenize))
        case = replace(case, max_tokens=rng.randint(1, max(1, count - 1)))
    return case


def draw_corpus(
    pair: Pair, seed: int, count: int, start: int, tokenize: Callable[[str], list[int]]
) -> dict[str, FuzzCase]:
    """Cases `start`..`start + count` of `seed`, by the replay session that scripts each."""
    return {f"f{i}": draw_case(pair, seed, i, tokenize) for i in range(start, start + count)}


def write_trace(path: Path, rows: dict[str, list[int]]) -> None:
    """A replay trace both mockers read: one engine output (token ids) per session."""
    with open(path, "w", encoding="utf-8") as f:
        for session, ids in rows.items():
            row = {"session_id": session, "output_length": len(ids), "output_token_ids": ids}
            f.write(json.dumps(row) + "\n")


def export_corpus(
    corpus: dict[str, FuzzCase], tokenize: Callable[[str], list[int]], out: Path
) -> None:
    """`trace.jsonl` for the mockers and `cases.jsonl` for `shakedown parity`."""
    out.mkdir(parents=True, exist_ok=True)
    write_trace(out / "trace.jsonl", {s: c.token_ids(tokenize) for s, c in corpus.items()})
    with open(out / "cases.jsonl", "w", encoding="utf-8") as f:
        for session, case in corpus.items():
            f.write(json.dumps(case.case_line(session), ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- the live stacks


@dataclass
class FuzzStack:
    """The reference (Dynamo frontend + mocker) and shakedown (loopback + mocker) for one
    pair, both replaying the trace given to `load`. The frontend stays up across loads;
    both mockers restart on the new trace."""

    pair: Pair
    dynamo_python: Path
    model_dir: Path
    work_dir: Path
    # The loopback's parsers when they deliberately differ (the mutation check).
    loopback_pair: Pair | None = None
    # A directory holding `o200k_base.tiktoken`, for the reference's Harmony encoding.
    harmony_vocab: Path | None = None
    procs: dict[str, stack.Proc] = field(default_factory=dict)
    loads: int = 0

    def __post_init__(self) -> None:
        self.kv_dir = self.work_dir / "kv"
        self.logs = self.work_dir / "logs"
        self.kv_dir.mkdir(parents=True, exist_ok=True)
        self.tokenize = Pipeline(self.model_dir).tokenize

    @property
    def reference(self) -> str:
        return self.procs["frontend"].base_url

    @property
    def shakedown(self) -> str:
        return self.procs["shakedown"].base_url

    def load(self, rows: dict[str, list[int]]) -> None:
        """Write `rows` as the trace and (re)start both mockers on it."""
        self.loads += 1
        trace = self.work_dir / f"trace-{self.loads}.jsonl"
        write_trace(trace, rows)
        for key in ("mocker", "shakedown"):
            if key in self.procs:
                self.procs.pop(key).stop()
        self.procs["mocker"] = stack.start_dynamo_mocker(
            self.dynamo_python,
            self.model_dir,
            trace,
            self.kv_dir,
            self.logs,
            tool_call_parser=self.pair.tool,
            reasoning_parser=self.pair.reasoning,
        )
        if "frontend" not in self.procs:
            self.procs["frontend"] = stack.start_dynamo_frontend(
                self.dynamo_python, self.kv_dir, self.logs, harmony_vocab=self.harmony_vocab
            )
        loopback = self.loopback_pair or self.pair
        self.procs["shakedown"] = stack.start_shakedown(
            self.model_dir,
            self.logs,
            name="shakedown",
            trace=trace,
            tool_call_parser=loopback.tool,
            reasoning_parser=loopback.reasoning,
        )
        stack.wait_ready(
            [self.procs["mocker"], self.procs["frontend"]], self.reference, stack.MODEL_NAME
        )

    def stop(self) -> None:
        for key in ("shakedown", "mocker", "frontend"):
            if key in self.procs:
                self.procs.pop(key).stop()

    def __enter__(self) -> FuzzStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cases(
    fuzz_stack: FuzzStack,
    cases: Sequence[FuzzCase],
    sessions: Sequence[str],
    jobs: int = 2,
    against_itself: bool = False,
) -> list[list[Outcome]]:
    """Every case unary and streaming; the outcomes of each case, in case order."""
    a = parse_endpoint(fuzz_stack.reference)
    b = a if against_itself else parse_endpoint(fuzz_stack.shakedown)

    def one(item: tuple[FuzzCase, str]) -> list[Outcome]:
        case, session = item
        return [
            compare(a, b, request) for request in requests_for(case.case(session), stack.MODEL_NAME)
        ]

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(one, zip(cases, sessions)))


# ---------------------------------------------------------------- classes of difference


_ABSENT = object()


def _paths(a: Any, b: Any, prefix: str = "") -> set[str]:
    """Dotted paths where two JSON values differ (list indices folded to `*`); a key
    that is missing on one side differs from one that is null."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for key in a.keys() | b.keys():
            out |= _paths(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{prefix}{key}.")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = set()
        for x, y in zip(a, b):
            out |= _paths(x, y, f"{prefix}*.")
        return out
    return set() if a == b and type(a) is type(b) else {prefix.rstrip(".") or "(body)"}


def _events(body: bytes) -> list[Any]:
    docs = []
    for event in sse_events(body):
        line = event.removeprefix(b"data: ")
        if line.startswith(b"{"):
            try:
                docs.append(json.loads(mask_generated(line)))
            except ValueError:
                docs.append(line.decode("utf-8", "replace"))
    return docs


def _merged(events: list[Any]) -> dict[str, Any]:
    """What a client assembles from a stream: the text fields joined, calls by index."""
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("usage"):
            out["usage"] = event["usage"]
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            out["content"] += delta.get("content") or choice.get("text") or ""
            out["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                slot = out["tool_calls"].setdefault(
                    call.get("index"), {"name": "", "arguments": ""}
                )
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    return out


def _field(path: str) -> str:
    """A differing path named by its field: `choices.*.message.content` is `content`."""
    for name in ("reasoning_tokens", "completion_tokens_details", "tool_calls"):
        if name in path.split("."):
            return name
    return path.rsplit(".", 1)[-1]


def difference_class(outcome: Outcome) -> str:
    """A short key for what differs: `MODE:field,field` (a stream whose assembled message
    matches but whose chunks differ is `stream:chunking`; same values in other bytes,
    such as another key order, is `MODE:bytes`)."""
    mode = outcome.request.mode
    if outcome.error is not None or outcome.a is None or outcome.b is None:
        return f"{mode}:error"
    a, b = outcome.a, outcome.b
    if a.status != b.status:
        return f"{mode}:status {a.status}/{b.status}"
    if mode == "stream" and a.headers.get("content-type", "").startswith("text/event-stream"):
        ea, eb = _events(a.body), _events(b.body)
        paths = _paths(_merged(ea), _merged(eb))
        if paths:
            return f"{mode}:" + ",".join(sorted({_field(p) for p in paths}))
        return f"{mode}:chunking"
    try:
        paths = _paths(json.loads(mask_generated(a.body)), json.loads(mask_generated(b.body)))
    except ValueError:
        return f"{mode}:bytes"
    return f"{mode}:" + (",".join(sorted({_field(p) for p in paths})) or "bytes")


# ---------------------------------------------------------------- shrinking


def _drop_spans(items: Sequence[Any]) -> Iterator[tuple[int, int]]:
    n = len(items)
    size = n // 2
    while size >= 1:
        for start in range(0, n - size + 1, size):
            yield start, start + size
        size //= 2


def candidates(case: FuzzCase) -> Iterator[FuzzCase]:
    """Smaller or simpler variants of `case`, biggest steps first."""
    if case.stop:
        yield replace(case, stop=())
    if case.max_tokens != NO_CUT:
        yield replace(case, max_tokens=NO_CUT)
    if case.include_usage:
        yield replace(case, include_usage=False)
    if case.tool_choice is not None:
        yield replace(case, tool_choice=None)
    if case.tools:
        yield replace(case, tools=False, tool_choice=None)
    if case.split != 0:
        yield replace(case, split=0)
    if case.split > 0:
        yield replace(case, split=-1)
    if not case.eos:
        yield replace(case, eos=True)
    if case.surface != "chat":
        yield replace(case, surface="chat")
    pieces = case.pieces
    for start, end in _drop_spans(pieces):
        if end - start < len(pieces):
            yield replace(case, pieces=pieces[:start] + pieces[end:])
    for i, piece in enumerate(pieces):
        if isinstance(piece, str) and len(piece) > 1:
            for start, end in _drop_spans(piece):
                shorter = piece[:start] + piece[end:]
                yield replace(case, pieces=(*pieces[:i], shorter, *pieces[i + 1 :]))
    # Adjacent text pieces merged: fewer, simpler pieces.
    for i in range(len(pieces) - 1):
        left, right = pieces[i], pieces[i + 1]
        if isinstance(left, str) and isinstance(right, str) and case.split != 0:
            yield replace(case, pieces=(*pieces[:i], left + right, *pieces[i + 2 :]))
    if case.max_tokens != NO_CUT and case.max_tokens > 1:
        yield replace(case, max_tokens=case.max_tokens - 1)


@dataclass
class Finding:
    """A case whose responses differ, and how it shrank."""

    case: FuzzCase
    outcomes: list[Outcome]
    original: FuzzCase | None = None
    rounds: int = 0

    @property
    def differing(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def classes(self) -> list[str]:
        return [difference_class(o) for o in self.differing]


def shrink(
    fuzz_stack: FuzzStack,
    findings: list[Finding],
    max_rounds: int = 40,
    per_round: int = 24,
    jobs: int = 2,
    log: Callable[[str], None] = lambda _: None,
) -> None:
    """Shrink every finding in place, all in the same rounds (one trace per round).

    A candidate is kept when a mode that differed before still differs; the first such
    candidate in `candidates` order wins. A finding is done when none is left."""
    # Per finding: its candidates and how many of them were tried.
    pending: dict[int, tuple[Finding, list[FuzzCase], int]] = {}
    for finding in findings:
        finding.original = finding.original or finding.case
        pending[id(finding)] = (finding, list(candidates(finding.case)), 0)
    for round_no in range(1, max_rounds + 1):
        batch: list[tuple[int, FuzzCase]] = []
        for key, (finding, todo, tried) in list(pending.items()):
            chunk = todo[tried : tried + per_round]
            batch += [(key, c) for c in chunk]
            pending[key] = (finding, todo, tried + len(chunk))
        if not batch:
            return
        sessions = [f"r{round_no}c{i}" for i in range(len(batch))]
        fuzz_stack.load({s: c.token_ids(fuzz_stack.tokenize) for s, (_, c) in zip(sessions, batch)})
        results = run_cases(fuzz_stack, [c for _, c in batch], sessions, jobs)
        improved: set[int] = set()
        for (key, candidate), outcomes in zip(batch, results):
            finding = pending[key][0]
            if key in improved:
                continue
            modes = {o.request.mode for o in finding.differing}
            if any(not o.ok and o.request.mode in modes for o in outcomes):
                finding.case, finding.outcomes = candidate, outcomes
                finding.rounds = round_no
                improved.add(key)
        for key, (finding, todo, tried) in list(pending.items()):
            if key in improved:
                pending[key] = (finding, list(candidates(finding.case)), 0)
            elif tried >= len(todo):
                del pending[key]
        log(f"  shrink round {round_no}: {len(batch)} candidates, {len(improved)} smaller")


# ---------------------------------------------------------------- golden fixtures


def golden(finding: Finding, pair: Pair, tokenize: Callable[[str], list[int]]) -> dict[str, Any]:
    """The shrunk reproducer as a fixture for tests/fixtures/pipeline/fuzz/: the parsers,
    the engine's token ids and, per mode, the request body and the reference's bytes
    (ids and `created` masked). `name` and `about` are for the person who commits it."""
    case = finding.case
    fixture: dict[str, Any] = {
        "name": "",
        "about": "",
        "found": f"{case.name}: {', '.join(finding.classes)}",
        "reasoning_parser": pair.reasoning,
        "tool_call_parser": pair.tool,
        "path": case.case("golden").path,
        "pieces": list(case.pieces),
        "token_ids": case.token_ids(tokenize),
    }
    for outcome in finding.outcomes:
        request, reference = outcome.request, outcome.a
        if reference is None or request.body is None:
            continue
        fixture[request.mode] = {
            "body": json.loads(request.body),
            "status": reference.status,
            "expected": mask_generated(reference.body).decode("utf-8"),
        }
    return fixture


# ---------------------------------------------------------------- the run


@dataclass
class PairReport:
    pair: Pair
    cases: int
    requests: int
    seconds: float
    findings: list[Finding]

    @property
    def classes(self) -> Counter[str]:
        return Counter(c for f in self.findings for c in f.classes)


def fuzz_pair(
    fuzz_stack: FuzzStack,
    seed: int,
    count: int,
    *,
    start: int = 0,
    jobs: int = 2,
    against_itself: bool = False,
) -> PairReport:
    """Draw `count` cases from `seed` and compare them; the findings are not shrunk."""
    began = time.monotonic()
    pair = fuzz_stack.pair
    corpus = draw_corpus(pair, seed, count, start, fuzz_stack.tokenize)
    sessions, cases = list(corpus), list(corpus.values())
    fuzz_stack.load({s: c.token_ids(fuzz_stack.tokenize) for s, c in corpus.items()})
    results = run_cases(fuzz_stack, cases, sessions, jobs, against_itself)
    findings = [Finding(c, o) for c, o in zip(cases, results) if any(not x.ok for x in o)]
    requests = sum(len(o) for o in results)
    return PairReport(pair, count, requests, time.monotonic() - began, findings)


def _print_finding(
    finding: Finding, fuzz_stack: FuzzStack, out: Any, golden_dir: Path | None
) -> None:
    print(f"\n=== {finding.case.name}: {', '.join(finding.classes)}", file=out)
    if finding.original is not None and finding.original is not finding.case:
        print(f"original: {finding.original.describe()}", file=out)
    print(f"minimal:  {finding.case.describe()}", file=out)
    for outcome in finding.differing:
        print(f"--- {outcome.request.mode}\n{outcome.error or outcome.diff}", file=out)
    fixture = golden(finding, fuzz_stack.pair, fuzz_stack.tokenize)
    text = json.dumps(fixture, ensure_ascii=False, indent=1) + "\n"
    if golden_dir is None:
        print(f"golden fixture:\n{text}", file=out)
        return
    golden_dir.mkdir(parents=True, exist_ok=True)
    path = golden_dir / (finding.case.name.replace("+", "_").replace("#", "-") + ".json")
    path.write_text(text, encoding="utf-8")
    print(f"golden fixture: {path}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shakedown.parity.fuzz",
        description=(
            "Differential fuzzing of shakedown's loopback against the real Dynamo 1.6.1 "
            "frontend: seeded model outputs replayed to both through their mockers, unary "
            "and streaming, each difference shrunk and printed as a golden fixture. "
            "Exit code 0 when every response matches."
        ),
    )
    parser.add_argument(
        "--dynamo-python",
        type=Path,
        help="interpreter of a venv with ai-dynamo==1.6.1 (tools/dynamo_venv.sh prints one)",
    )
    parser.add_argument("--model-dir", required=True, type=Path, help="model directory")
    parser.add_argument(
        "--harmony-vocab",
        type=Path,
        help=(
            "directory holding o200k_base.tiktoken, for the reference's Harmony encoding "
            f"(tools/o200k_base.sh prints one; default: {stack.HARMONY_VOCAB_VAR} as set)"
        ),
    )
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="REASONING+TOOL",
        help=f"parser pair, `none` for no parser (repeatable; default: {', '.join(PAIRS)})",
    )
    parser.add_argument("--cases", type=int, default=300, help="outputs per pair (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="grammar seed (default 1)")
    parser.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="cases in flight (default 2)")
    parser.add_argument(
        "--shrink", type=int, default=5, help="findings to shrink per pair (default 5)"
    )
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="compare the reference with itself instead (its determinism on the corpus)",
    )
    parser.add_argument("--work-dir", type=Path, help="keep traces and logs here")
    parser.add_argument(
        "--golden-dir", type=Path, help="write each golden fixture to a file here, not stdout"
    )
    parser.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="start nothing: write each pair's corpus to DIR/PAIR/ (trace.jsonl for both "
        "mockers, cases.jsonl for `shakedown parity --cases`)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        pairs = [parse_pair(p) for p in args.pair] or list(PAIRS.values())
    except ValueError as err:
        parser.error(str(err))
    out = sys.stdout
    if args.export is not None:
        tokenize = Pipeline(args.model_dir).tokenize
        for pair in pairs:
            where = args.export / _dir_name(pair)
            export_corpus(
                draw_corpus(pair, args.seed, args.cases, args.start, tokenize), tokenize, where
            )
            print(f"{pair.name}: {args.cases} cases of seed {args.seed} in {where}", file=out)
        return 0
    if args.dynamo_python is None:
        parser.error("--dynamo-python is required (unless --export)")
    total_differ = 0
    with stack.sigterm_exits(), tempfile.TemporaryDirectory(prefix="shakedown-fuzz-") as tmp:
        root = args.work_dir or Path(tmp)
        for pair in pairs:
            work = root / _dir_name(pair)
            with FuzzStack(
                pair, args.dynamo_python, args.model_dir, work, harmony_vocab=args.harmony_vocab
            ) as fuzz_stack:
                try:
                    report = fuzz_pair(
                        fuzz_stack,
                        args.seed,
                        args.cases,
                        start=args.start,
                        jobs=args.jobs,
                        against_itself=args.self_check,
                    )
                except RuntimeError as err:  # a side that refuses the pair, or died
                    print(f"{pair.name}: could not run: {err}", file=out, flush=True)
                    total_differ += 1
                    continue
                differ = sum(len(f.differing) for f in report.findings)
                total_differ += differ
                print(
                    f"{pair.name}: seed {args.seed}, {report.cases} cases, {report.requests} "
                    f"requests, {differ} differ ({len(report.findings)} cases) "
                    f"in {report.seconds:.1f}s",
                    file=out,
                    flush=True,
                )
                for cls, n in report.classes.most_common():
                    print(f"  {n:4d}  {cls}", file=out)
                chosen = one_per_class(report.findings)[: args.shrink]
                if chosen and not args.self_check:
                    shrink(fuzz_stack, chosen, jobs=args.jobs, log=lambda s: print(s, file=out))
                for finding in chosen:
                    _print_finding(finding, fuzz_stack, out, args.golden_dir)
    return 1 if total_differ else 0


def _dir_name(pair: Pair) -> str:
    return pair.name.replace("+", "_")


def one_per_class(findings: Iterable[Finding]) -> list[Finding]:
    """The first finding of each class set, so shrinking covers distinct differences."""
    seen: set[tuple[str, ...]] = set()
    chosen = []
    for finding in findings:
        key = tuple(sorted(set(finding.classes)))
        if key not in seen:
            seen.add(key)
            chosen.append(finding)
    return chosen


if __name__ == "__main__":
    sys.exit(main())
