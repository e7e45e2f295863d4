"""`shakedown doctor` and the same check at attach: the packaged tiny model, and copies of it
with templates written the way other model families write theirs."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_endpoints import thinking_model
from shakedown.cli import TINY_MODEL, build_parser
from shakedown.doctor import run_doctor
from shakedown.validation import ValidationConfig, WorkerValidation
from validation_helpers import Factory, tiny_card, tiny_engine

# A Qwen3-style template: reasoning in <think> blocks with newlines, one <tool_call> per call,
# and an enable_thinking flag that closes an empty think block in the generation prompt.
QWEN3_STYLE = (
    "{% if tools %}<|system|>Tools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}{% if m.role == 'user' %}<|user|>{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}<|assistant|>{% if m.reasoning_content %}<think>\n"
    "{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m.content }}"
    "{% for c in m.tool_calls or [] %}\n<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|eos|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and "
    "not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
# Mistral-style calls: [TOOL_CALLS] then a JSON list.
MISTRAL_STYLE = (
    "{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
    "{% elif m.role == 'assistant' %}{{ m.content }}{% if m.tool_calls %}[TOOL_CALLS]["
    "{% for c in m.tool_calls %}"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "{% endfor %}]{% endif %}<|eos|>{% endif %}{% endfor %}"
)
# A template that shows neither an assistant's reasoning nor its tool calls, and opens a
# think block in the generation prompt (as DeepSeek-R1's does).
PLAIN_HISTORY = (
    "{% for m in messages %}{% if m.role == 'user' %}<|user|>{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}<|assistant|>{{ m.content }}<|eos|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
)


def model_with(tmp_path: Path, template: str, model_type: str = "llama") -> Path:
    out = tmp_path / f"model-{model_type}"
    shutil.copytree(TINY_MODEL, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    model_config = json.loads((out / "config.json").read_text())
    model_config["model_type"] = model_type
    (out / "config.json").write_text(json.dumps(model_config))
    return out


def doctor(model: Path, *args: str) -> tuple[int, list[str]]:
    parsed = build_parser().parse_args(["doctor", str(model), *args])
    out = io.StringIO()
    code = run_doctor(parsed, out=out)
    return code, out.getvalue().splitlines()


def test_the_tiny_model_passes() -> None:
    code, lines = doctor(
        TINY_MODEL, "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "hermes"
    )
    assert code == 0
    assert lines == [
        "ok    reasoning: the template's `<think>`…`</think>` reads back through `deepseek_r1`",
        "ok    tool calls: the template's `<tool_call>` reads back through `hermes`",
        "OK: 0 mismatch(es), 0 warning(s)",
    ]


def test_a_wrong_tool_call_parser_is_named_with_its_fix() -> None:
    code, lines = doctor(
        TINY_MODEL, "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "mistral"
    )
    assert code == 1
    # The fix names hermes first; other families that also read the markup may follow.
    assert any(
        line.startswith(
            "FAIL  tool calls: the template emits `<tool_call>` but the configured tool-call "
            "parser is `mistral` (reads no call: the markup stays in content): use `hermes`"
        )
        for line in lines
    )
    assert lines[-1] == "MISMATCH: 1 mismatch(es), 0 warning(s)"


def test_a_parser_that_swallows_the_markup() -> None:
    code, lines = doctor(
        TINY_MODEL, "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "qwen3_coder"
    )
    assert code == 1
    assert "is `qwen3_coder` (reads no call and swallows the markup): use `hermes`" in lines[1]


def test_a_wrong_reasoning_parser_is_named_with_its_fix() -> None:
    code, lines = doctor(
        TINY_MODEL, "--reasoning-parser", "gpt_oss", "--tool-call-parser", "hermes"
    )
    assert code == 1
    assert lines[0] == (
        "FAIL  reasoning: the template wraps reasoning in `<think>`…`</think>` but the configured "
        "reasoning parser is `gpt_oss` (finds no reasoning in it): use `basic` (or deepseek_r1, "
        "deepseek_v4, qwen3, ...)"
    )


def test_no_parsers_are_suggested_not_failed() -> None:
    code, lines = doctor(TINY_MODEL)
    assert code == 0
    assert lines[1].startswith(
        "warn  tool calls: the template emits `<tool_call>` but no tool-call parser is set: tool "
        "calls would arrive as content; use `hermes`"
    )


def test_the_model_family_ranks_first(tmp_path: Path) -> None:
    model = model_with(tmp_path, QWEN3_STYLE, model_type="qwen3")
    code, lines = doctor(model, "--reasoning-parser", "mistral", "--tool-call-parser", "hermes")
    assert code == 1
    # As in Dynamo 1.6.1, mistral parses reasoning only when the request sets a
    # reasoning_effort, so the answer carries none
    assert "parser is `mistral` (finds no reasoning in it)" in lines[0]
    assert lines[0].endswith("): use `qwen3` (or basic, deepseek_r1, deepseek_v4, ...)")
    assert lines[1] == "ok    tool calls: the template's `<tool_call>` reads back through `hermes`"
    assert doctor(model, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes")[0] == 0


def test_mistral_style_calls(tmp_path: Path) -> None:
    model = model_with(tmp_path, MISTRAL_STYLE, model_type="mistral")
    code, lines = doctor(model, "--tool-call-parser", "hermes")
    assert code == 1
    assert (
        "the template emits `[TOOL_CALLS]` but the configured tool-call parser is `hermes`"
        in lines[0]
    )
    assert ": use `mistral`" in lines[0]
    assert doctor(model, "--tool-call-parser", "mistral") == (
        0, ["ok    tool calls: the template's `[TOOL_CALLS]` reads back through `mistral`",
            "warn  vocabulary: `[TOOL_CALLS]` is not one token of the vocabulary (12 tokens): "
            "check the model really emits it",
            "OK: 0 mismatch(es), 1 warning(s)"],
    )  # fmt: skip


def test_what_the_template_does_not_show_cannot_be_proven(tmp_path: Path) -> None:
    model = model_with(tmp_path, PLAIN_HISTORY)
    code, lines = doctor(model, "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "hermes")
    assert code == 0
    assert lines == [
        "warn  reasoning: the template does not read an assistant's reasoning_content, so the "
        "`deepseek_r1` parser cannot be proven from it",
        "warn  tool calls: the template does not render an assistant's tool calls, so the "
        "`hermes` parser cannot be proven from it",
        "OK: 0 mismatch(es), 2 warning(s)",
    ]


def test_chat_template_kwargs_the_template_ignores(tmp_path: Path) -> None:
    flag = '{"enable_thinking": false}'
    code, lines = doctor(TINY_MODEL, "--reasoning-parser", "deepseek_r1", "--tool-call-parser",
                         "hermes", "--chat-template-kwargs", flag)  # fmt: skip
    assert code == 1
    assert lines[2] == (
        'FAIL  template kwargs: the template ignores chat_template_kwargs {"enable_thinking": '
        "false}: the prompt is the same with and without them; drop them or use a template "
        "that reads them"
    )
    honoured = doctor(thinking_model(tmp_path), "--chat-template-kwargs", flag)
    assert (
        'ok    template kwargs: chat_template_kwargs {"enable_thinking": false} change the prompt'
        in honoured[1]
    )


def test_unknown_parser_and_json_report(tmp_path: Path) -> None:
    report = tmp_path / "doctor.json"
    code, lines = doctor(TINY_MODEL, "--tool-call-parser", "hermes2", "--json", str(report))
    assert code == 1
    assert lines[0].startswith("FAIL  parsers: unknown tool-call parser 'hermes2'; valid: ")
    assert " hermes," in lines[0]
    data = json.loads(report.read_text())
    assert data["passed"] is False
    assert data["findings"][0] == {"level": "error", "topic": "parsers", "message": lines[0][15:]}


def test_not_a_model_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor(tmp_path)[0] == 2
    assert f"shakedown doctor: {tmp_path}" in capsys.readouterr().err


# --- at attach -------------------------------------------------------------------------------


@pytest.fixture
def validation(tmp_path: Path) -> Iterator[WorkerValidation]:
    gate = json.dumps([{"name": "pass", "exec": [sys.executable, "-c", "pass"]}])
    environ = {
        "DYN_WORKER_VALIDATION_GATES": gate,
        "DYN_WORKER_VALIDATION_REPORT": str(tmp_path / "r.json"),
    }
    made = WorkerValidation(
        ValidationConfig.from_env(environ), endpoint_factory=Factory(), log_dir=tmp_path
    )
    yield made
    made.close()


def test_a_mismatch_at_attach_holds_the_worker_with_the_fix(
    validation: WorkerValidation, tmp_path: Path
) -> None:
    card = dataclasses.replace(tiny_card(), tool_call_parser="mistral")
    validation.attach(card, tiny_engine())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "held"
    assert report.gates == []
    assert report.reason is not None and report.reason.startswith(
        "the configuration is wrong: tool calls: the template emits `<tool_call>` but the "
        "configured tool-call parser is `mistral` (reads no call: the markup stays in content): "
        "use `hermes`"
    )
    assert json.loads((tmp_path / "r.json").read_text())["reason"] == report.reason


def test_a_matching_card_goes_on_to_its_gates(validation: WorkerValidation) -> None:
    validation.attach(tiny_card(), tiny_engine())
    report = validation.wait_finished(20)
    assert report is not None and report.status == "released", report.reason
    assert [gate.outcome for gate in report.gates] == ["passed"]
