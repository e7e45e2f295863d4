"""Runs vLLM's and SGLang's own parsers, as their chat serving calls them, on outputs it is sent.

Started by tests/conformance/peers.py with the python of tools/peers_venv.sh; speaks JSON lines
on stdin/stdout. One request:

    {"peer": "vllm" | "sglang", "reasoning": name | null, "tool": name | null,
     "text": ..., "tools": [...], "tokens": [special tokens of the family],
     "vocab": "deepseek" (default: the test tokenizer) | "harmony" (gpt-oss's encoding)}

answers {"whole": RESULT, "stream": RESULT, "deltas": [...]} where RESULT is
{"content", "reasoning", "calls": [[name, arguments]]} or {"error": "..."}.
`{"registries": true}` answers every parser name each peer registers
({"vllm": {"tool": [...], "reasoning": [...]}, "sglang": {...}}).

- "vllm": the parser class vLLM's `ParserManager.get_parser` composes for the two names
  (its `HarmonyParser` for the "harmony" vocab, as for a gpt-oss checkpoint);
  whole output through `Parser.parse`, streamed through `ChatStreamProcessor.step` (the chat
  server's per-chunk code), one detokenized token per delta.
- "sglang": `ReasoningParser` then `FunctionCallParser`, whole (`parse_non_stream`) and
  streamed (`parse_stream_chunk`, `parse_stream_end` on the last delta, then the unstreamed
  argument tail its server appends), as SGLang's serving_chat does.
- with --plugin, shakedown's parsers take over vLLM's names as `--tool-parser-plugin` /
  `--reasoning-parser-plugin shakedown.integrations.vllm` make them, and "vllm" runs them.

Every call is bounded by an alarm (a hang is reported as an error, not waited on).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import peer_imports

CALL_SECONDS = 20


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"no answer within {CALL_SECONDS} s")


class PeerTokenizer:
    """The project's real test tokenizer (a `tokenizers` JSON) with the family's special tokens
    added, offering the subset of the Hugging Face tokenizer API the parsers call."""

    def __init__(self, path: str, special: list[str]) -> None:
        from tokenizers import AddedToken, Tokenizer

        self._tok = Tokenizer.from_file(path)
        if special:
            self._tok.add_special_tokens(
                [AddedToken(t, special=True, normalized=False) for t in special]
            )
        self._vocab = self._tok.get_vocab(with_added_tokens=True)
        self.all_special_tokens = list(special)
        self.all_special_ids = [self._vocab[t] for t in special]
        self.eos_token_id = 1
        self.bos_token_id = 0
        self.eos_token = self._tok.id_to_token(1)
        self.name_or_path = path
        self.vocab_size = len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    @property
    def vocab(self) -> dict[str, int]:
        return self._vocab

    def __len__(self) -> int:
        return len(self._vocab)

    def encode(self, text: str, add_special_tokens: bool = False, **kwargs: Any) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if isinstance(ids, int):
            ids = [ids]
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return list(self._tok.encode(text, add_special_tokens=False).tokens)

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._vocab.get(tokens)
        return [self._vocab.get(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self.decode(self.convert_tokens_to_ids(tokens))


class HarmonyTokenizer(PeerTokenizer):
    """gpt-oss's own tokenizer: the Harmony encoding (o200k_base plus Harmony's special
    tokens), which vLLM's Harmony parser decodes token ids with, so the ids it is given
    must be that encoding's. Needs TIKTOKEN_ENCODINGS_BASE (tools/o200k_base.sh). Its
    vocabulary as offered here is the special tokens only: no parser looks up a plain
    token by text."""

    def __init__(self, path: str, special: list[str]) -> None:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        self._enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        self._vocab = {t: self._enc.encode(t, allowed_special="all")[0] for t in special}
        self._names = {i: t for t, i in self._vocab.items()}
        self.all_special_tokens = list(special)
        self.all_special_ids = [self._vocab[t] for t in special]
        self.eos_token = "<|return|>"
        self.eos_token_id = self._enc.encode(self.eos_token, allowed_special="all")[0]
        self.bos_token_id = self._enc.encode("<|startoftext|>", allowed_special="all")[0]
        self.name_or_path = "openai/gpt-oss-20b"
        self.vocab_size = len(self._vocab)

    def encode(self, text: str, add_special_tokens: bool = False, **kwargs: Any) -> list[int]:
        return list(self._enc.encode(text, allowed_special="all"))

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if isinstance(ids, int):
            ids = [ids]
        if skip_special_tokens:
            ids = [i for i in ids if i not in self._names]
        return str(self._enc.decode(list(ids)))

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.decode([i]) for i in self.encode(text)]

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            return self.decode([ids])
        return [self.decode([i]) for i in ids]


TOKENIZERS = {"deepseek": PeerTokenizer, "harmony": HarmonyTokenizer}


def token_deltas(tok: PeerTokenizer, text: str) -> list[tuple[str, list[int]]]:
    """One delta per token, as an incremental detokenizer releases text: a token that ends
    mid-character waits for the next one."""
    ids = tok.encode(text)
    deltas: list[tuple[str, list[int]]] = []
    sent, pending = "", []
    for i, token in enumerate(ids):
        pending.append(token)
        decoded = tok.decode(ids[: i + 1])
        if decoded.endswith("\ufffd") and i + 1 < len(ids):
            continue
        deltas.append((decoded[len(sent) :], pending))
        sent, pending = decoded, []
    return deltas


def _result(content: str | None, reasoning: str | None, calls: list[list[str]]) -> dict[str, Any]:
    return {"content": content or "", "reasoning": reasoning or "", "calls": calls}


class Vllm:
    def __init__(self) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
        from vllm.parser.parser_manager import ParserManager

        self.request_cls = ChatCompletionRequest
        self.stream_cls = ChatStreamProcessor
        self.manager = ParserManager

    def request(self, tools: list[dict[str, Any]]) -> Any:
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        return self.request_cls(
            model="m", messages=messages, tools=tools or None, tool_choice="auto" if tools else None
        )

    def parser(self, tok: PeerTokenizer, case: dict[str, Any], request: Any) -> tuple[Any, Any]:
        cls = self.manager.get_parser(
            tool_parser_name=case["tool"],
            reasoning_parser_name=case["reasoning"],
            enable_auto_tools=True,
            tokenizer=tok,
            # What the chat server passes for a gpt-oss checkpoint (its model_type).
            is_harmony=case.get("vocab") == "harmony",
        )
        return cls, cls(tok, request.tools, chat_template_kwargs={}, model_config=None)

    def whole(
        self, tok: PeerTokenizer, case: dict[str, Any], text: str, ids: list[int]
    ) -> dict[str, Any]:
        request = self.request(case["tools"])
        _, parser = self.parser(tok, case, request)
        reasoning, content, calls = parser.parse(
            text, request, enable_auto_tools=True, model_output_token_ids=ids
        )
        return _result(content, reasoning, [[c.name, c.arguments] for c in calls or []])

    def stream(
        self, tok: PeerTokenizer, case: dict[str, Any], deltas: list[tuple[str, list[int]]]
    ) -> dict[str, Any]:
        request = self.request(case["tools"])
        cls, parser = self.parser(tok, case, request)
        processor = self.stream_cls(request, parser, enable_auto_tools=True, parser_cls=cls)
        prompt = tok.encode("User: What is the weather in Paris?\nAssistant:")
        content, reasoning, calls = "", "", {}
        for i, (delta_text, delta_ids) in enumerate(deltas):
            last = i == len(deltas) - 1
            step = processor.step(delta_text, list(delta_ids), "stop" if last else None, prompt)
            delta = step.delta
            if delta is None:
                continue
            content += delta.content or ""
            reasoning += delta.reasoning or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", ""])
                if call.function is not None:
                    entry[0] += call.function.name or ""
                    entry[1] += call.function.arguments or ""
        return _result(content, reasoning, [calls[i] for i in sorted(calls)])


class Sglang:
    def __init__(self) -> None:
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, Tool
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        self.request_cls, self.tool_cls = ChatCompletionRequest, Tool
        self.calls_cls, self.reasoning_cls = FunctionCallParser, ReasoningParser

    def _parsers(self, tok: PeerTokenizer, case: dict[str, Any], stream: bool) -> tuple[Any, Any]:
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        request = self.request_cls(model="m", messages=messages, tools=case["tools"] or None)
        reasoning = None
        if case["reasoning"]:
            reasoning = self.reasoning_cls(
                case["reasoning"], stream, False, request, tokenizer=tok,
                tool_call_parser_active=bool(case["tool"]),
            )  # fmt: skip
        calls = None
        if case["tool"]:
            tools = [self.tool_cls(**t) for t in case["tools"]]
            calls = self.calls_cls(tools, case["tool"], tokenizer=tok)
        return reasoning, calls

    def whole(self, tok: PeerTokenizer, case: dict[str, Any], text: str) -> dict[str, Any]:
        reasoning_parser, call_parser = self._parsers(tok, case, stream=False)
        reasoning = None
        if reasoning_parser is not None:
            reasoning, text = reasoning_parser.parse_non_stream(text)
        calls: list[list[str]] = []
        if call_parser is not None and call_parser.has_tool_call(text):
            text, items = call_parser.parse_non_stream(text)
            calls = [[item.name, item.parameters] for item in items]
        return _result(text, reasoning, calls)

    def stream(
        self, tok: PeerTokenizer, case: dict[str, Any], deltas: list[tuple[str, list[int]]]
    ) -> dict[str, Any]:
        reasoning_parser, call_parser = self._parsers(tok, case, stream=True)
        content, reasoning, calls = "", "", []
        for i, (delta, _) in enumerate(deltas):
            last = i == len(deltas) - 1
            if reasoning_parser is not None:
                thought, delta = reasoning_parser.parse_stream_chunk(delta)
                if last:
                    end_thought, end_text = reasoning_parser.parse_stream_end()
                    thought = (thought or "") + (end_thought or "")
                    delta = (delta or "") + (end_text or "")
                reasoning += thought or ""
            if call_parser is None:
                content += delta or ""
                continue
            text, items = call_parser.parse_stream_chunk(delta or "")
            if last:
                end_text, end_items = call_parser.parse_stream_end()
                text, items = (text or "") + end_text, [*items, *end_items]
            content += text or ""
            for item in items:
                if item.name:
                    calls.append([item.name, ""])
                if calls:
                    calls[-1][1] += item.parameters or ""
        if call_parser is not None and calls:
            calls[-1][1] += _unstreamed_args(call_parser.detector)
        return _result(content, reasoning, calls)


def _unstreamed_args(detector: Any) -> str:
    """The argument tail SGLang's serving_chat appends when the stream ends."""
    done = getattr(detector, "prev_tool_call_arr", None)
    streamed = getattr(detector, "streamed_args_for_tool", None)
    if not done or not streamed or len(done) - 1 >= len(streamed):
        return ""
    expected = done[-1].get("arguments", {})
    expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
    actual = streamed[len(done) - 1]
    return expected[len(actual) :] if expected.startswith(actual) else ""


def registries() -> dict[str, dict[str, list[str]]]:
    """Every tool-call and reasoning parser name each peer registers, from its own registry."""
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.parser.reasoning_parser import ReasoningParser
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    return {
        "vllm": {
            "tool": ToolParserManager.list_registered(),
            "reasoning": ReasoningParserManager.list_registered(),
        },
        "sglang": {
            "tool": sorted(FunctionCallParser.ToolCallParserEnum),
            "reasoning": sorted(ReasoningParser.DetectorMap),
        },
    }


def _guarded(fn: Any, *args: Any) -> dict[str, Any]:
    signal.alarm(CALL_SECONDS)
    try:
        return dict(fn(*args))
    except Hang as exc:
        return {"error": f"hang: {exc}"}
    except Exception as exc:  # a peer's crash is data, reported per case
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return {
            "error": f"crash: {type(exc).__name__}: {exc} ({Path(frame.filename).name}:{frame.lineno})"
        }
    finally:
        signal.alarm(0)


def _timed(
    peer: Any, tok: PeerTokenizer, case: dict[str, Any], text: str, ids: list[int], deltas: Any
) -> dict[str, Any]:
    """Best-of-`repeat` seconds for the whole and the streamed parse (benches/bench_vllm_plugin.py)."""
    import time

    best = {"whole": float("inf"), "stream": float("inf"), "chunks": len(deltas)}
    for _ in range(case["repeat"]):
        for mode, call in (
            ("whole", lambda: peer.whole(tok, case, text, ids)),
            ("stream", lambda: peer.stream(tok, case, deltas)),
        ):
            started = time.perf_counter()
            call()
            best[mode] = min(best[mode], time.perf_counter() - started)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json of the test model")
    ap.add_argument(
        "--plugin",
        metavar="DIR",
        help="load shakedown (the package in DIR) as vLLM's tool- and reasoning-parser plugin",
    )
    args = ap.parse_args()

    peer_imports.install()
    vllm, sglang = Vllm(), Sglang()
    if args.plugin:
        sys.path.append(args.plugin)
        from vllm.reasoning import ReasoningParserManager
        from vllm.tool_parsers import ToolParserManager

        # What `vllm serve --tool-parser-plugin ... --reasoning-parser-plugin ...` runs.
        ToolParserManager.import_tool_parser("shakedown.integrations.vllm")
        ReasoningParserManager.import_reasoning_parser("shakedown.integrations.vllm")
        # vLLM logs a plugin that fails to import and goes on without it; here that is fatal.
        plugin = sys.modules["shakedown.integrations.vllm"]
        if not all(plugin.registered()):
            raise SystemExit("the shakedown plugin registered no parser")
    peer_imports.seal()
    signal.signal(signal.SIGALRM, _alarm)
    tokenizers: dict[tuple[str, ...], PeerTokenizer] = {}
    print(json.dumps({"ready": True}), flush=True)

    for line in sys.stdin:
        case = json.loads(line)
        if case.get("registries"):
            print(json.dumps(registries()), flush=True)
            continue
        key = (case.get("vocab", "deepseek"), *case["tokens"])
        if key not in tokenizers:
            tokenizers[key] = TOKENIZERS[key[0]](args.tokenizer, list(key[1:]))
        tok = tokenizers[key]
        # The checkpoint's `response_template`, where vLLM's and SGLang's parsers look.
        if case.get("response_template") is not None:
            tok.response_template = case["response_template"]  # type: ignore[attr-defined]
        # vLLM's `beam` reads the checkpoint's `response_template` metadata: a Beam
        # checkpoint's is the profile SGLang ships.
        if "beam" in (case["tool"], case["reasoning"]) and not hasattr(tok, "response_template"):
            from sglang.srt.parser.beam import BEAM_RESPONSE_TEMPLATE

            tok.response_template = BEAM_RESPONSE_TEMPLATE  # type: ignore[attr-defined]
        deltas = token_deltas(tok, case["text"])
        text = "".join(d for d, _ in deltas)
        ids = [i for _, group in deltas for i in group]
        peer = case["peer"]
        if case.get("repeat"):
            print(json.dumps(_timed(vllm, tok, case, text, ids, deltas)), flush=True)
            continue
        if peer == "sglang":
            whole = _guarded(sglang.whole, tok, case, text)
            stream = _guarded(sglang.stream, tok, case, deltas)
        else:
            whole = _guarded(vllm.whole, tok, case, text, ids)
            stream = _guarded(vllm.stream, tok, case, deltas)
        answer = {"whole": whole, "stream": stream, "deltas": [d for d, _ in deltas]}
        print(json.dumps(answer, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
