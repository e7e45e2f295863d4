"""Seeded model outputs for differential fuzzing: what a model might write, for one
reasoning + tool-call parser pair, cut into the pieces the fuzzer tokenizes.

An output is a tuple of pieces: text, or an int (a raw token id, for special tokens).
The grammar mixes plain and multi-byte text, the pair's reasoning markers (present,
missing, doubled, truncated), its tool calls (complete, partial, several, nested in
reasoning, malformed arguments), stray end markers, JSON objects bare and fenced, and
`<`, `</` and marker prefixes anywhere. Everything is drawn from one `random.Random`,
so a seed names an output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Piece = str | int
Args = dict[str, Any]

WEATHER = "get_weather"
TIME = "get_time"
UNKNOWN = "launch_rocket"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": WEATHER,
            "description": "Get weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": TIME,
            "description": "Get time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]

WORDS = ("Sure.", "Hello", "the", "weather", "is", "fine", "42", "call", "tool", "x", "A:", "ok")
UNICODE = ("ü", "Grüße", "世界", "👋", "é", "e\u0301", "—", "½", "👩\u200d💻", "日本語", "ß")
ANGLES = ("<", "</", "<>", "a < b", "<b>", "x<y", "<<", "< /", "<!--", ">", "<|", "|>", "/>")
BRACKETS = ("[", "]", "{", "}", "()", "```", "`", '"', "'", "\\", ";", ":")
SPACES = (" ", "\n", "\n\n", "  ", "\t", " \n")
SPECIAL_IDS = (0, 2)  # BOS and pad of the DeepSeek vocabulary: special tokens mid-output


# ---------------------------------------------------------------- tool-call formats


@dataclass(frozen=True)
class Call:
    name: str
    args: Args
    # The arguments as the model wrote them (JSON text, maybe malformed).
    text: str


def _json_text(rng: random.Random, value: Any) -> str:
    style = rng.random()
    if style < 0.5:
        return json.dumps(value, ensure_ascii=False)
    if style < 0.75:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if style < 0.9:
        return json.dumps(value, ensure_ascii=False, indent=rng.choice((1, 2)))
    return json.dumps(value, ensure_ascii=True)


def _string_value(rng: random.Random) -> str:
    return rng.choice(
        (
            "Paris",
            "New York",
            "Zürich",
            "東京",
            'say "hi"',
            "a\nb",
            "</tool_call>",
            "<think>",
            "{x}",
            "",
            "\\",
            "CET",
            "👋",
        )
    )


def _args(rng: random.Random, name: str) -> Args:
    if name == TIME:
        return {"tz": _string_value(rng)} if rng.random() < 0.8 else {}
    if name == WEATHER:
        args: Args = {"city": _string_value(rng)}
        if rng.random() < 0.4:
            args["days"] = rng.choice((1, 3, -2, 10**12))
        if rng.random() < 0.3:
            args["metric"] = rng.random() < 0.5
        if rng.random() < 0.15:
            args["extra"] = rng.choice(({"a": [1, 2, {"b": None}]}, [1.5, "x"], 2.50, None))
        return args
    return {"n": rng.randint(0, 9)} if rng.random() < 0.5 else {}


def _malformed(rng: random.Random, text: str) -> str:
    kind = rng.randrange(5)
    if kind == 0 and text.endswith("}"):
        return text[:-1]
    if kind == 1:
        return text.replace('"', "", 2)
    if kind == 2 and text.endswith("}"):
        return text[:-1] + ",}"
    if kind == 3:
        return text.replace('"', "'")
    return text[: rng.randrange(len(text) + 1)]


def make_call(rng: random.Random, malformed_rate: float = 0.1) -> Call:
    name = rng.choices((WEATHER, TIME, UNKNOWN), (6, 3, 1))[0]
    args = _args(rng, name)
    text = _json_text(rng, args)
    if rng.random() < malformed_rate:
        text = _malformed(rng, text)
    return Call(name, args, text)


def _ws(rng: random.Random) -> str:
    return rng.choice(("", "", "", "\n", " ", "\n\n"))


def _wrapper_json(rng: random.Random, call: Call, key: str = "arguments") -> str:
    sep = rng.choice((" ", "", "\n"))
    return f'{{"name":{sep}"{call.name}",{sep}"{key}":{sep}{call.text}}}'


ToolRender = Callable[[random.Random, Sequence[Call]], list[Piece]]


def _hermes(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = []
    for i, call in enumerate(calls):
        if i:
            out.append(_ws(rng))
        out += ["<tool_call>", _ws(rng) + _wrapper_json(rng, call) + _ws(rng), "</tool_call>"]
    return out


def _qwen3_coder(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = []
    for i, call in enumerate(calls):
        if i:
            out.append(_ws(rng))
        out += ["<tool_call>", "\n", f"<function={call.name}>", "\n"]
        for key, value in call.args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out += [f"<parameter={key}>", "\n" + text + "\n", "</parameter>", "\n"]
        out += ["</function>", "\n", "</tool_call>"]
    return out


KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
KIMI_CALL = ("<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")


def _kimi_k2(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = [KIMI_SECTION[0]]
    for i, call in enumerate(calls):
        call_id = f"functions.{call.name}:{i}" if rng.random() < 0.9 else f"{call.name}:{i}"
        out += [_ws(rng), KIMI_CALL[0], call_id, KIMI_CALL[1], call.text, KIMI_CALL[2]]
    return [*out, _ws(rng), KIMI_SECTION[1]]


def _harmony(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = []
    for call in calls:
        head = rng.choice(("<|start|>assistant<|channel|>commentary", "<|channel|>commentary"))
        constrain = rng.choice((" <|constrain|>json", " json", ""))
        out += [head, f" to=functions.{call.name}{constrain}", "<|message|>", call.text, "<|call|>"]
    return out


DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")


def _deepseek_v3_1(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = [DS_CALLS[0]]
    for call in calls:
        out += [DS_CALL[0], call.name, DS_CALL[1], call.text, DS_CALL[2]]
    return [*out, DS_CALLS[1]]


def _deepseek_v3(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = [DS_CALLS[0]]
    for call in calls:
        body = f"{call.name}\n```json\n{call.text}\n```"
        out += [DS_CALL[0], "function", DS_CALL[1], body, DS_CALL[2]]
    return [*out, DS_CALLS[1]]


def _mistral(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    if rng.random() < 0.5:
        items = ", ".join(_wrapper_json(rng, c) for c in calls)
        return ["[TOOL_CALLS]", f"[{items}]"]
    out: list[Piece] = []
    for call in calls:
        out += ["[TOOL_CALLS]", call.name, "[ARGS]", call.text]
    return out


def _llama3_json(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    key = rng.choice(("parameters", "arguments"))
    bodies = [_wrapper_json(rng, c, key) for c in calls]
    head: list[Piece] = ["<|python_tag|>"] if rng.random() < 0.5 else []
    return [*head, rng.choice(("; ", ";", "\n")).join(bodies)]


def _py_value(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "None"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_py_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_py_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _pythonic(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    items = [
        f"{c.name}({', '.join(f'{k}={_py_value(v)}' for k, v in c.args.items())})" for c in calls
    ]
    body = "[" + ", ".join(items) + "]"
    if rng.random() < 0.3:
        return ["<|python_start|>", body, "<|python_end|>"]
    return [body]


def _nemotron_deci(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    items = ", ".join(_wrapper_json(rng, c) for c in calls)
    return ["<TOOLCALL>", f"[{items}]", "</TOOLCALL>"]


def _default(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    choice = rng.randrange(3)
    if choice == 0:
        return _nemotron_deci(rng, calls)
    if choice == 1:
        return _llama3_json(rng, calls)
    return _hermes(rng, calls)


def _jamba(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    items = ", ".join(_wrapper_json(rng, c) for c in calls)
    return ["<tool_calls>", f"[{items}]", "</tool_calls>"]


def _phi4(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    items = ", ".join(_wrapper_json(rng, c) for c in calls)
    return ["functools", f"[{items}]"]


def _glm47(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = []
    for call in calls:
        out += ["<tool_call>", call.name]
        for key, value in call.args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out += ["<arg_key>", key, "</arg_key>", "<arg_value>", text, "</arg_value>"]
        out.append("</tool_call>")
    return out


def _minimax_m2(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
    out: list[Piece] = ["<minimax:tool_call>"]
    for call in calls:
        out += ["\n", f'<invoke name="{call.name}">']
        for key, value in call.args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            out += [f'<parameter name="{key}">', text, "</parameter>"]
        out.append("</invoke>")
    return [*out, "\n", "</minimax:tool_call>"]


DSML = "｜DSML｜"


def _dsml(outer: str) -> ToolRender:
    def render(rng: random.Random, calls: Sequence[Call]) -> list[Piece]:
        out: list[Piece] = [f"<{DSML}{outer}>"]
        for call in calls:
            out += ["\n", f'<{DSML}invoke name="{call.name}">']
            for key, value in call.args.items():
                is_str = isinstance(value, str)
                text = value if is_str else json.dumps(value, ensure_ascii=False)
                flag = "true" if is_str else "false"
                out += [f'<{DSML}parameter name="{key}" string="{flag}">', text]
                out.append(f"</{DSML}parameter>")
            out.append(f"</{DSML}invoke>")
        return [*out, "\n", f"</{DSML}{outer}>"]

    return render


@dataclass(frozen=True)
class ToolFormat:
    render: ToolRender
    # Every marker of the format, for stray, partial and prefix insertion.
    markers: tuple[str, ...]
    # The format's calls are JSON objects (the wrapper the JSON-in-content rules see).
    json_calls: bool = True


TOOL_FORMATS: dict[str, ToolFormat] = {
    "hermes": ToolFormat(_hermes, ("<tool_call>", "</tool_call>")),
    "qwen3_coder": ToolFormat(
        _qwen3_coder,
        ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>"),
        json_calls=False,
    ),
    "kimi_k2": ToolFormat(_kimi_k2, (*KIMI_SECTION, *KIMI_CALL)),
    "harmony": ToolFormat(
        _harmony,
        ("<|start|>", "<|channel|>", "<|message|>", "<|call|>", "<|constrain|>", "<|end|>"),
    ),
    "deepseek_v3": ToolFormat(_deepseek_v3, (*DS_CALLS, *DS_CALL)),
    "deepseek_v3_1": ToolFormat(_deepseek_v3_1, (*DS_CALLS, *DS_CALL)),
    "mistral": ToolFormat(_mistral, ("[TOOL_CALLS]", "[ARGS]", "[/TOOL_CALLS]")),
    "llama3_json": ToolFormat(_llama3_json, ("<|python_tag|>",)),
    "pythonic": ToolFormat(_pythonic, ("<|python_start|>", "<|python_end|>"), json_calls=False),
    "nemotron_deci": ToolFormat(_nemotron_deci, ("<TOOLCALL>", "</TOOLCALL>")),
    "default": ToolFormat(_default, ("<TOOLCALL>", "</TOOLCALL>", "<|python_tag|>")),
    "jamba": ToolFormat(_jamba, ("<tool_calls>", "</tool_calls>")),
    "phi4": ToolFormat(_phi4, ("functools",)),
    "glm47": ToolFormat(
        _glm47,
        ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        json_calls=False,
    ),
    "minimax_m2": ToolFormat(
        _minimax_m2,
        ("<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=", "</invoke>"),
        json_calls=False,
    ),
    "deepseek_v3_2": ToolFormat(
        _dsml("function_calls"),
        (f"<{DSML}function_calls>", f"</{DSML}function_calls>", f"<{DSML}invoke name="),
        json_calls=False,
    ),
    "deepseek_v4": ToolFormat(
        _dsml("tool_calls"),
        (f"<{DSML}tool_calls>", f"</{DSML}tool_calls>", f"<{DSML}invoke name="),
        json_calls=False,
    ),
}


# ---------------------------------------------------------------- reasoning formats


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    # Written before content once reasoning ended (Harmony's final channel header).
    content_head: str = ""
    extra: tuple[str, ...] = ()


THINK = ReasoningFormat("<think>", "</think>")
REASONING_FORMATS: dict[str, ReasoningFormat] = {
    "gpt_oss": ReasoningFormat(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        content_head="<|start|>assistant<|channel|>final<|message|>",
        extra=("<|return|>", "<|start|>", "<|channel|>", "<|message|>"),
    ),
    "mistral": ReasoningFormat("[THINK]", "[/THINK]"),
    "granite": ReasoningFormat("Here is my thought process:", "Here is my response:"),
    "kimi": ReasoningFormat("◁think▷", "◁/think▷"),
    "minimax_m3": ReasoningFormat("<mm:think>", "</mm:think>"),
    "gemma4": ReasoningFormat("<|channel>thought\n", "<channel|>", extra=("<|channel>",)),
}


def reasoning_format(name: str) -> ReasoningFormat:
    return REASONING_FORMATS.get(name, THINK)


# ---------------------------------------------------------------- the grammar


@dataclass(frozen=True)
class Pair:
    """A reasoning parser and a tool-call parser as the worker's card names them."""

    reasoning: str | None
    tool: str | None
    # The tool grammar to draw calls from (a name's family), when it is not `tool`.
    tool_family: str | None = None

    @property
    def name(self) -> str:
        return f"{self.reasoning or 'none'}+{self.tool or 'none'}"

    @property
    def tool_format(self) -> ToolFormat | None:
        family = self.tool_family or self.tool
        return TOOL_FORMATS.get(family) if family else None


@dataclass
class Generator:
    pair: Pair
    rng: random.Random
    markers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pair.reasoning:
            fmt = reasoning_format(self.pair.reasoning)
            self.markers += [fmt.start, fmt.end, *fmt.extra]
        tool = self.pair.tool_format
        if tool is not None:
            self.markers += tool.markers
        # Markers of other families show up in real output too.
        self.markers += ["<think>", "</think>", "<tool_call>", "</tool_call>"]

    def text(self, atoms: int = 4) -> list[Piece]:
        rng = self.rng
        out: list[Piece] = []
        for _ in range(rng.randint(1, atoms)):
            kind = rng.random()
            if kind < 0.45:
                out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))))
            elif kind < 0.6:
                out.append(rng.choice(UNICODE))
            elif kind < 0.7:
                out.append(rng.choice(ANGLES))
            elif kind < 0.78:
                out.append(rng.choice(SPACES))
            elif kind < 0.86:
                marker = rng.choice(self.markers)
                out.append(marker[: rng.randint(1, max(1, len(marker) - 1))])
            elif kind < 0.92:
                out.append(rng.choice(BRACKETS))
            elif kind < 0.96:
                out.append(rng.choice(self.markers))
            elif kind < 0.98:
                out.append(self.json_object())
            else:
                out.append(rng.choice(SPECIAL_IDS))
        return out

    def json_object(self) -> str:
        rng = self.rng
        call = make_call(rng, 0.05)
        body = rng.choice(
            (
                _wrapper_json(rng, call),
                _wrapper_json(rng, call, "parameters"),
                f"[{_wrapper_json(rng, call)}]",
                _json_text(rng, call.args),
            )
        )
        if rng.random() < 0.4:
            return f"```json\n{body}\n```"
        return body

    def calls(self, fmt: ToolFormat) -> list[Piece]:
        rng = self.rng
        calls = [make_call(rng) for _ in range(rng.choices((1, 2, 3), (6, 3, 1))[0])]
        pieces = fmt.render(rng, calls)
        if rng.random() < 0.12:
            # Partial: cut inside the rendering (a reply that stops mid-call).
            flat = "".join(p if isinstance(p, str) else "" for p in pieces)
            return [flat[: rng.randrange(1, max(2, len(flat)))]]
        return pieces

    def reasoning(self, fmt: ReasoningFormat) -> list[Piece]:
        rng = self.rng
        out: list[Piece] = []
        if rng.random() < 0.8:
            out.append(fmt.start)
        if rng.random() < 0.05:
            out.append(fmt.start)
        out += self.text(3)
        tool = self.pair.tool_format
        if tool is not None and rng.random() < 0.1:
            out += self.calls(tool)
            out += self.text(1)
        roll = rng.random()
        if roll < 0.75:
            out.append(fmt.end)
        elif roll < 0.82:
            out.append(fmt.end[: rng.randint(1, len(fmt.end) - 1)])
        if rng.random() < 0.05:
            out += [*self.text(1), fmt.end]
        if fmt.content_head and rng.random() < 0.7:
            out.append(fmt.content_head)
        return out

    def output(self) -> list[Piece]:
        rng = self.rng
        out: list[Piece] = []
        if self.pair.reasoning and rng.random() < 0.75:
            out += self.reasoning(reasoning_format(self.pair.reasoning))
        tool = self.pair.tool_format
        for _ in range(rng.randint(0, 4)):
            kind = rng.random()
            if tool is not None and kind < 0.35:
                out += self.calls(tool)
            elif kind < 0.45:
                out.append(self.json_object())
            elif kind < 0.5:
                out.append(rng.choice(self.markers))
            else:
                out += self.text()
        if not out:
            out += self.text()
        return out


def generate(pair: Pair, rng: random.Random) -> list[Piece]:
    """One model output for `pair`, drawn from `rng`."""
    return Generator(pair, rng).output()
