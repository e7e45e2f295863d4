"""Seeded well-formed model outputs per parser family, for conformance against vLLM and SGLang.

The differential fuzzer's grammar is adversarial (stray and truncated markers, malformed
arguments); conformance asks a narrower question — on output a model of the family really
writes, do the three parsers give the same calls, content and reasoning? — so this grammar
writes only well-formed output: optional reasoning in the family's markers, plain content,
then tool calls in the family's exact syntax with arguments that match the declared schema.
A (family, seed) pair names an output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Args = dict[str, Any]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
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
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    },
]

WORDS: tuple[str, ...] = (
    "Sure",
    "the",
    "weather",
    "in",
    "Paris",
    "is",
    "mild",
    "today",
    "I",
    "will",
    "check",
)
WORDS += ("Grüße", "東京", "👋", "naïve", "½", "it's", "42", "ok", "first", "then")
CITIES = ("Paris", "New York", "Zürich", "東京", "São Paulo", "Köln")
QUERIES = ("best pizza", "weather radar", "how to tie a tie", "日本語 news", 'say "hi"')


@dataclass(frozen=True)
class Call:
    name: str
    args: Args


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 9))]
    return " ".join(words) + rng.choice((".", "!", "?", ":"))


def _text(rng: random.Random) -> str:
    return rng.choice((" ", "\n", "\n\n")).join(_sentence(rng) for _ in range(rng.randint(1, 3)))


def _call(rng: random.Random) -> Call:
    if rng.random() < 0.6:
        args: Args = {"city": rng.choice(CITIES)}
        if rng.random() < 0.5:
            args["days"] = rng.randint(1, 14)
        if rng.random() < 0.3:
            args["metric"] = rng.random() < 0.5
        return Call("get_weather", args)
    args = {"query": rng.choice(QUERIES)}
    if rng.random() < 0.4:
        args["limit"] = rng.randint(1, 50)
    return Call("search", args)


def _json(args: Args) -> str:
    return json.dumps(args, ensure_ascii=False)


def _value(value: Any) -> str:
    """A value as XML-style formats write it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


Render = Callable[[random.Random, Sequence[Call]], str]


def _hermes(rng: random.Random, calls: Sequence[Call]) -> str:
    body = (
        f'<tool_call>\n{{"name": "{c.name}", "arguments": {_json(c.args)}}}\n</tool_call>'
        for c in calls
    )
    return "\n".join(body)


def _llama3_json(rng: random.Random, calls: Sequence[Call]) -> str:
    return "; ".join(f'{{"name": "{c.name}", "parameters": {_json(c.args)}}}' for c in calls)


def _json_list(calls: Sequence[Call]) -> str:
    return json.dumps([{"name": c.name, "arguments": c.args} for c in calls], ensure_ascii=False)


def _mistral(rng: random.Random, calls: Sequence[Call]) -> str:
    """Before tokenizer v11 (no `[ARGS]` token): the call list after `[TOOL_CALLS]`, which a
    SentencePiece tokenizer decodes with its word-start space (mistral-common's
    `InstructTokenizerV2._encode_tool_calls_in_assistant_message`)."""
    return "[TOOL_CALLS] " + _json_list(calls)


def _mistral_v11(rng: random.Random, calls: Sequence[Call]) -> str:
    """Tokenizer v11 on: `[TOOL_CALLS]NAME[ARGS]{json}` per call (mistral-common's
    `InstructTokenizerV11` and later)."""
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{_json(c.args)}" for c in calls)


def _py(value: Any) -> str:
    return repr(value) if isinstance(value, (str, bool)) else json.dumps(value)


def _pythonic(rng: random.Random, calls: Sequence[Call]) -> str:
    items = (f"{c.name}({', '.join(f'{k}={_py(v)}' for k, v in c.args.items())})" for c in calls)
    return "[" + ", ".join(items) + "]"


DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")


def _deepseek_v3(rng: random.Random, calls: Sequence[Call]) -> str:
    body = "".join(
        f"{DS_CALL[0]}function{DS_CALL[1]}{c.name}\n```json\n{_json(c.args)}\n```{DS_CALL[2]}"
        for c in calls
    )
    return DS[0] + body + DS[1]


def _deepseek_v3_1(rng: random.Random, calls: Sequence[Call]) -> str:
    body = "".join(f"{DS_CALL[0]}{c.name}{DS_CALL[1]}{_json(c.args)}{DS_CALL[2]}" for c in calls)
    return DS[0] + body + DS[1]


def _dsml(block: str) -> Render:
    tag = "｜DSML｜"

    def render(rng: random.Random, calls: Sequence[Call]) -> str:
        out = [f"<{tag}{block}>\n"]
        for c in calls:
            out.append(f'<{tag}invoke name="{c.name}">\n')
            for k, v in c.args.items():
                flag = "true" if isinstance(v, str) else "false"
                out.append(
                    f'<{tag}parameter name="{k}" string="{flag}">{_value(v)}</{tag}parameter>\n'
                )
            out.append(f"</{tag}invoke>\n")
        return "".join(out) + f"</{tag}{block}>"

    return render


def _qwen3_coder(rng: random.Random, calls: Sequence[Call]) -> str:
    out = []
    for c in calls:
        params = "".join(f"<parameter={k}>\n{_value(v)}\n</parameter>\n" for k, v in c.args.items())
        out.append(f"<tool_call>\n<function={c.name}>\n{params}</function>\n</tool_call>")
    return "\n".join(out)


def _glm(newline: str) -> Render:
    def render(rng: random.Random, calls: Sequence[Call]) -> str:
        out = []
        for c in calls:
            args = "".join(
                f"<arg_key>{k}</arg_key>{newline}<arg_value>{_value(v)}</arg_value>{newline}"
                for k, v in c.args.items()
            )
            out.append(f"<tool_call>{c.name}{newline}{args}</tool_call>")
        return "\n".join(out)

    return render


def _kimi_k2(rng: random.Random, calls: Sequence[Call]) -> str:
    body = "".join(
        f"<|tool_call_begin|>functions.{c.name}:{i}<|tool_call_argument_begin|>{_json(c.args)}<|tool_call_end|>"
        for i, c in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def _minimax_m2(rng: random.Random, calls: Sequence[Call]) -> str:
    out = ["<minimax:tool_call>\n"]
    for c in calls:
        params = "".join(
            f'<parameter name="{k}">{_value(v)}</parameter>\n' for k, v in c.args.items()
        )
        out.append(f'<invoke name="{c.name}">\n{params}</invoke>\n')
    return "".join(out) + "</minimax:tool_call>"


def _step3(rng: random.Random, calls: Sequence[Call]) -> str:
    body = ""
    for c in calls:
        params = "".join(
            f'<steptml:parameter name="{k}">{_value(v)}</steptml:parameter>'
            for k, v in c.args.items()
        )
        invoke = f'<steptml:invoke name="{c.name}">{params}</steptml:invoke>'
        body += f"<｜tool_call_begin｜>function<｜tool_sep｜>{invoke}<｜tool_call_end｜>"
    return f"<｜tool_calls_begin｜>{body}<｜tool_calls_end｜>"


def _gemma_value(value: Any) -> str:
    return f'<|"|>{value}<|"|>' if isinstance(value, str) else json.dumps(value)


def _gemma4(rng: random.Random, calls: Sequence[Call]) -> str:
    return "".join(
        f"<|tool_call>call:{c.name}{{{','.join(f'{k}:{_gemma_value(v)}' for k, v in c.args.items())}}}<tool_call|>"
        for c in calls
    )


def _jamba(rng: random.Random, calls: Sequence[Call]) -> str:
    return f"<tool_calls>{_json_list(calls)}</tool_calls>"


def _phi4(rng: random.Random, calls: Sequence[Call]) -> str:
    return "functools" + _json_list(calls)


def _seed_oss(rng: random.Random, calls: Sequence[Call]) -> str:
    out = []
    for c in calls:
        params = "".join(f"<parameter={k}>{_value(v)}</parameter>\n" for k, v in c.args.items())
        out.append(f"<seed:tool_call>\n<function={c.name}>\n{params}</function>\n</seed:tool_call>")
    return "\n".join(out)


def _longcat(rng: random.Random, calls: Sequence[Call]) -> str:
    body = (
        f'<longcat_tool_call>{{"name": "{c.name}", "arguments": {_json(c.args)}}}</longcat_tool_call>'
        for c in calls
    )
    return "\n".join(body)


def _internlm(rng: random.Random, calls: Sequence[Call]) -> str:
    body = (
        f'<|action_start|><|plugin|>\n{{"name": "{c.name}", "parameters": {_json(c.args)}}}<|action_end|>'
        for c in calls
    )
    return "\n".join(body)


HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|call|>",
           "<|return|>")  # fmt: skip


def _harmony(rng: random.Random, fam: Family, long_content: int) -> str:
    """gpt-oss's output after the prompt's `<|start|>assistant`: reasoning in the analysis
    channel, then either the final answer or a call (`commentary to=functions.F`), which a
    preamble (commentary with no recipient: content) may precede. `<|call|>` and `<|return|>`
    stop generation, so there is one call at most."""
    lead = " ".join(_sentence(rng) for _ in range(long_content))
    messages = []
    if long_content or rng.random() < 0.85:
        messages.append(f"<|channel|>analysis<|message|>{_text(rng)}<|end|>")
    if fam.ours[1] and (long_content or rng.random() < 0.65):
        if lead or rng.random() < 0.5:
            messages.append(f"<|channel|>commentary<|message|>{lead or _text(rng)}<|end|>")
        c = _call(rng)
        messages.append(
            f"<|channel|>commentary to=functions.{c.name} <|constrain|>json<|message|>"
            f"{_json(c.args)}<|call|>"
        )
    else:
        end = rng.choice(("", "<|return|>"))
        messages.append(f"<|channel|>final<|message|>{lead or _text(rng)}{end}")
    return "<|start|>assistant".join(messages)


def _beam(rng: random.Random, fam: Family, long_content: int) -> str:
    """A Beam checkpoint's output after the prompt's `<|start|>assistant`: reasoning in the
    analysis channel, then either the final answer or calls (` to=F`, arguments as
    `<rfl:parameter>` elements in name order), each call but the last ending at the next
    message's start, the last at the `<|call|>` stop token."""
    lead = " ".join(_sentence(rng) for _ in range(long_content))
    out = ""
    if long_content or rng.random() < 0.85:
        out += f"<|channel|>analysis<|message|>{_text(rng)}<|end|><|start|>assistant"
    if fam.ours[1] and (long_content or rng.random() < 0.65):
        calls = [_call(rng) for _ in range(rng.choices((1, 2), (3, 1))[0])]
        out += "<|end|><|start|>assistant".join(
            f" to={c.name}<|channel|>analysis <|constrain|>xml<|message|>"
            + "".join(
                f'<rfl:parameter name="{k}">\n{_value(c.args[k])}\n</rfl:parameter>'
                for k in sorted(c.args)
            )
            for c in calls
        )
        return out + "<|call|>"
    end = rng.choice(("", "<|return|>"))
    return out + f"<|channel|>final<|message|>{lead or _text(rng)}{end}"


BEAM = ("<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|call|>",
        "<|return|>")  # fmt: skip


@dataclass(frozen=True)
class Reasoning:
    """A reasoning format: its markers, and whether output starts inside reasoning."""

    start: str
    end: str
    starts_inside: bool = False


THINK = Reasoning("<think>", "</think>")
THINK_INSIDE = Reasoning("<think>", "</think>", starts_inside=True)


@dataclass(frozen=True)
class Family:
    """One format, with the names each implementation registers it under (None: no parser)."""

    name: str
    ours: tuple[str | None, str | None]  # (reasoning, tool_call) as shakedown names them
    vllm: tuple[str | None, str | None] | None
    sglang: tuple[str | None, str | None] | None
    render: Render | None = None
    reasoning: Reasoning | None = None
    # Special tokens of the family's vocabulary (the peers look some up by id).
    tokens: tuple[str, ...] = ()
    # Whether content may precede the calls (a format whose whole output is the call list
    # does not allow it), and whether text may follow them.
    content_before: bool = True
    content_after: bool = False
    max_calls: int = 2
    # Writes the whole output itself, for a format whose reasoning, content and calls are
    # framed as messages (Harmony); `render` and `reasoning` are then unused.
    compose: Callable[[random.Random, Family, int], str] | None = None
    # The tokenizer the peers get: the tests' DeepSeek one with `tokens` added, or the
    # family's own ("harmony": gpt-oss's, for parsers that read token ids).
    vocab: str = "deepseek"
    # The checkpoint's `response_template` (the template families read it from the
    # tokenizer; shakedown takes it as `response_template=`).
    response_template: dict[str, Any] | None = None


# A checkpoint's response template with Qwen-style markers (calls as Hermes writes them).
QWEN_TEMPLATE: dict[str, Any] = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "content": "json",
            "transform": {
                "type": "function",
                "function": {"name": "{content.name}", "arguments": "{content.arguments}"},
            },
        },
    },
}


FAMILIES: tuple[Family, ...] = (
    Family("hermes", (None, "hermes"), (None, "hermes"), (None, "hermes"), _hermes,
           tokens=("<tool_call>", "</tool_call>")),
    Family("qwen3+hermes", ("qwen3", "hermes"), ("qwen3", "hermes"), ("qwen3", "qwen25"), _hermes,
           THINK, tokens=("<tool_call>", "</tool_call>", "<think>", "</think>")),
    Family("llama3_json", (None, "llama3_json"), (None, "llama3_json"), (None, "llama3"),
           _llama3_json, content_before=False, tokens=("<|python_tag|>",)),
    # A model's vocabulary says which form it writes (vLLM reads the form off it too).
    Family("mistral", (None, "mistral"), (None, "mistral"), (None, "mistral"), _mistral,
           tokens=("[TOOL_CALLS]",)),
    Family("mistral_v11", (None, "mistral"), (None, "mistral"), (None, "mistral"), _mistral_v11,
           tokens=("[TOOL_CALLS]", "[ARGS]")),
    Family("pythonic", (None, "pythonic"), (None, "pythonic"), (None, "pythonic"), _pythonic,
           content_before=False),
    Family("deepseek_v3", ("deepseek_r1", "deepseek_v3"), ("deepseek_r1", "deepseek_v3"),
           ("deepseek-r1", "deepseekv3"), _deepseek_v3, THINK_INSIDE,
           tokens=(*DS, *DS_CALL, "<think>", "</think>")),
    Family("deepseek_v3_1", (None, "deepseek_v3_1"), (None, "deepseek_v31"), (None, "deepseekv31"),
           _deepseek_v3_1, tokens=(*DS, *DS_CALL)),
    Family("deepseek_v3_2", (None, "deepseek_v3_2"), (None, "deepseek_v32"), (None, "deepseekv32"),
           _dsml("function_calls")),
    Family("deepseek_v4", (None, "deepseek_v4"), (None, "deepseek_v4"), (None, "deepseekv4"),
           _dsml("tool_calls")),
    Family("qwen3_coder", ("qwen3", "qwen3_coder"), ("qwen3", "qwen3_coder"), ("qwen3", "qwen3_coder"),
           _qwen3_coder, THINK, tokens=("<tool_call>", "</tool_call>", "<think>", "</think>")),
    Family("glm45", ("glm45", "glm45"), ("glm45", "glm45"), ("glm45", "glm45"), _glm("\n"), THINK,
           tokens=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                   "</arg_value>", "<think>", "</think>")),
    Family("glm47", ("glm45", "glm47"), ("glm45", "glm47"), ("glm45", "glm47"), _glm(""), THINK,
           tokens=("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                   "</arg_value>", "<think>", "</think>")),
    Family("kimi_k2", ("kimi_k2", "kimi_k2"), ("kimi_k2", "kimi_k2"), ("kimi_k2", "kimi_k2"),
           _kimi_k2, THINK,
           tokens=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                   "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>")),
    Family("minimax_m2", ("minimax_m2", "minimax_m2"), ("minimax_m2", "minimax_m2"),
           ("minimax", "minimax-m2"), _minimax_m2, THINK_INSIDE,
           tokens=("<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>")),
    Family("step3", ("step3", "step3"), ("step3", "step3"), ("step3", "step3"), _step3, THINK_INSIDE,
           tokens=("<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>",
                   "<｜tool_call_end｜>", "<｜tool_sep｜>", "<think>", "</think>")),
    Family("gemma4", ("gemma4", "gemma4"), ("gemma4", "gemma4"), ("gemma4", "gemma4"), _gemma4,
           Reasoning("<|channel>thought\n", "<channel|>"),
           tokens=("<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>")),
    Family("jamba", (None, "jamba"), (None, "jamba"), None, _jamba,
           tokens=("<tool_calls>", "</tool_calls>")),
    Family("phi4", (None, "phi4"), (None, "phi4_mini_json"), None, _phi4, content_before=False),
    Family("seed_oss", ("seed_oss", "seed_oss"), ("seed_oss", "seed_oss"), None, _seed_oss,
           Reasoning("<seed:think>", "</seed:think>"),
           tokens=("<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>")),
    Family("longcat", (None, "longcat"), (None, "longcat"), None, _longcat,
           tokens=("<longcat_tool_call>", "</longcat_tool_call>")),
    Family("internlm", (None, "internlm"), (None, "internlm"), (None, "interns1"), _internlm,
           tokens=("<|action_start|>", "<|plugin|>", "<|action_end|>")),
    Family("harmony", ("gpt_oss", "harmony"), ("openai_gptoss", "openai"), ("gpt-oss", "gpt-oss"),
           compose=_harmony, tokens=HARMONY, vocab="harmony"),
    # Parsed with Beam's response template (SGLang's built-in; vLLM reads the checkpoint's).
    Family("beam", ("beam", "beam"), ("beam", "beam"), ("beam", "beam"), compose=_beam,
           tokens=BEAM),
    # Parsed with the checkpoint's response template (vLLM's name for the family is `hf`).
    Family("response_template", ("response_template", "response_template"), ("hf", "hf"),
           ("response_template", "response_template"), _hermes, THINK,
           tokens=("<|im_start|>", "<tool_call>", "</tool_call>", "<think>", "</think>"),
           response_template=QWEN_TEMPLATE),
    # Reasoning alone.
    Family("deepseek_r1", ("deepseek_r1", None), ("deepseek_r1", None), ("deepseek-r1", None),
           reasoning=THINK_INSIDE, tokens=("<think>", "</think>")),
    Family("qwen3", ("qwen3", None), ("qwen3", None), ("qwen3", None), reasoning=THINK,
           tokens=("<think>", "</think>")),
    Family("nemotron_v3", ("nemotron_v3", None), ("nemotron_v3", None), ("nemotron_3", None),
           reasoning=THINK_INSIDE, tokens=("<think>", "</think>")),
    Family("kimi", ("kimi", None), None, ("kimi", None), reasoning=Reasoning("◁think▷", "◁/think▷")),
    Family("mistral_reasoning", ("mistral", None), ("mistral", None), ("mistral", None),
           reasoning=Reasoning("[THINK]", "[/THINK]"), tokens=("[THINK]", "[/THINK]", "[TOOL_CALLS]")),
    Family("granite", ("granite", None), ("granite", None), None,
           reasoning=Reasoning("Here is my thought process:", "Here is my response:")),
    Family("gpt_oss", ("gpt_oss", None), ("openai_gptoss", None), ("gpt-oss", None),
           compose=_harmony, tokens=HARMONY, vocab="harmony"),
    Family("minimax_append_think", ("minimax_append_think", None), ("minimax_m2_append_think", None),
           ("minimax-append-think", None), reasoning=THINK_INSIDE, tokens=("<think>", "</think>")),
)  # fmt: skip


def family(name: str) -> Family:
    for fam in FAMILIES:
        if fam.name == name:
            return fam
    raise KeyError(name)


def generate(fam: Family, seed: int, *, long_content: int = 0) -> str:
    """One well-formed output of `fam`, named by `seed`; `long_content` sentences of content
    lead it (for timing)."""
    rng = random.Random(f"{fam.name}:{seed}")
    if fam.compose is not None:
        return fam.compose(rng, fam, long_content)
    if long_content:
        lead = " ".join(_sentence(rng) for _ in range(long_content))
        tail = fam.render(rng, [_call(rng), _call(rng)]) if fam.render else ""
        reasoning = f"{fam.reasoning.start}{_text(rng)}{fam.reasoning.end}" if fam.reasoning else ""
        return f"{reasoning}{lead}\n{tail}"
    out = ""
    if fam.reasoning is not None and rng.random() < 0.85:
        start = "" if fam.reasoning.starts_inside and rng.random() < 0.5 else fam.reasoning.start
        out += start + _text(rng) + fam.reasoning.end + rng.choice(("", "\n", "\n\n"))
    calls = fam.render is not None and rng.random() < 0.65
    if not calls or (fam.content_before and rng.random() < 0.6):
        out += _text(rng)
        if calls:
            out += rng.choice(("\n", " ", "\n\n"))
    if calls and fam.render is not None:
        count = rng.choices(range(1, fam.max_calls + 1), (3, 1)[: fam.max_calls])[0]
        out += fam.render(rng, [_call(rng) for _ in range(count)])
        if fam.content_after and rng.random() < 0.3:
            out += "\n" + _text(rng)
    return out
