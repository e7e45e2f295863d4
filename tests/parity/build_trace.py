"""Write the replay trace both mockers play: one JSONL row per scripted reply.

Row: {"session_id": S, "output_length": N, "output_token_ids": [...]}; a request picks row K
of session S with nvext.annotations ["output_replay_id:S:K"]. The texts are the ones the
Dynamo 1.6.1 reference captures used; a trailing <EOS> appends the EOS id (1), without it
the reply ends on `length`.

usage: python build_trace.py MODEL_DIR OUT.jsonl   (needs `tokenizers`; the Dynamo venv has it)
"""

from __future__ import annotations

import json
import sys

SCRIPT: dict[str, list[str]] = {
    "tool": [
        '<think>plan</think>Sure.<tool_call>{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}</tool_call><EOS>'
    ],
    "text": ["<think>The user greets me.</think>Hello there! How can I help you today?<EOS>"],
    "noeos": ["<think>short</think>No EOS at the end."],
    "plain": ["Plain answer without any think tags.<EOS>"],
    "twotools": [
        '<think>two calls</think><tool_call>{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}</tool_call>\n<tool_call>{"name": "get_time", "arguments": '
        '{"tz": "CET"}}</tool_call><EOS>'
    ],
    "unicode": ["<think>ü</think>Grüße, 世界! 👋<EOS>"],
    "after": [
        '<think>x</think>Before.<tool_call>{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}</tool_call>After.<EOS>'
    ],
    "unknowntool": [
        '<think>x</think><tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call><EOS>'
    ],
    "badjson": [
        '<think>x</think><tool_call>{"name": "get_weather", "arguments": {city: Paris}'
        "</tool_call><EOS>"
    ],
    "nothinktool": [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><EOS>'
    ],
    "conv": ["<think>a</think>First turn.<EOS>", "<think>b</think>Second turn.<EOS>"],
}
EOS_ID = 1
EOS_MARK = "<EOS>"


def main(model_dir: str, out: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        for session, turns in SCRIPT.items():
            for text in turns:
                eos = text.endswith(EOS_MARK)
                body = text[: -len(EOS_MARK)] if eos else text
                ids = tok.encode(body, add_special_tokens=False).ids + ([EOS_ID] if eos else [])
                row = {"session_id": session, "output_length": len(ids), "output_token_ids": ids}
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
