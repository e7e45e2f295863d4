"""`shakedown serve` as a newcomer runs it: a real process, its printed URL, signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from shakedown.cli import build_parser

MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "Weather in Paris?"}]
# The reference parses tool calls only when the request offers tools.
TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@contextmanager
def serve(
    *args: str, extra_path: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "shakedown", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        if not first.startswith("OPENAI_BASE_URL="):
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"first line {first!r}; stderr:\n{err}")
        yield proc, first.strip().split("=", 1)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def stop(proc: subprocess.Popen[str], signum: int) -> int:
    proc.send_signal(signum)
    return proc.wait(timeout=5)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_default_serve_gives_reasoning_content_and_a_tool_call(signum: int) -> None:
    with serve() as (proc, url):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert (
            proc.stdout is not None
            and proc.stdout.readline().strip() == "DYN_VALIDATION_MODEL=tiny"
        )
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        r = client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            max_tokens=64,  # the mocker requires it, like Dynamo's
        )
        message = r.choices[0].message
        assert message.model_extra is not None and message.model_extra["reasoning_content"]
        assert message.content
        assert message.tool_calls and message.tool_calls[0].function.name == "get_weather"
        assert r.choices[0].finish_reason == "tool_calls"
        assert stop(proc, signum) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(url.removesuffix("/v1") + "/live")


def test_fixed_port_and_model_name() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with serve("--port", str(port), "--model-name", "mini") as (proc, url):
        assert url == f"http://127.0.0.1:{port}/v1"
        assert [m["id"] for m in httpx.get(f"{url}/models").json()["data"]] == ["mini"]
        assert stop(proc, signal.SIGINT) == 0


def test_replay_trace_rows_are_served(tmp_path: Path) -> None:
    from shakedown._core import Pipeline
    from shakedown.cli import TINY_MODEL

    ids = Pipeline(str(TINY_MODEL)).tokenize("<think>traced</think>From the trace.")
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        json.dumps({"session_id": "t", "output_length": len(ids), "output_token_ids": ids}) + "\n"
    )
    with serve("--replay-trace", str(trace)) as (proc, url):
        body = {
            "model": "tiny",
            "messages": MESSAGES,
            "max_tokens": 100,
            "nvext": {"annotations": ["output_replay_id:t:0"]},
        }
        message = httpx.post(f"{url}/chat/completions", json=body).json()["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("traced", "From the trace.")
        assert stop(proc, signal.SIGINT) == 0


def test_engine_from_module_attr(tmp_path: Path) -> None:
    (tmp_path / "my_engine.py").write_text(
        textwrap.dedent(
            """
            class Echo:
                async def generate(self, request, context):
                    for token in request["token_ids"][-2:]:
                        yield {"token_ids": [token]}
                    yield {"token_ids": [], "finish_reason": "stop"}

            engine = Echo()
            """
        )
    )
    with serve("--engine", "my_engine:engine", extra_path=tmp_path) as (proc, url):
        r = httpx.post(
            f"{url}/completions", json={"model": "tiny", "prompt": "Hello there", "max_tokens": 4}
        )
        assert r.status_code == 200
        assert (
            r.json()["choices"][0]["text"] == "Hello there"[-len(r.json()["choices"][0]["text"]) :]
        )
        assert r.json()["usage"]["completion_tokens"] == 2
        assert stop(proc, signal.SIGTERM) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "no_such_module_xyz:engine"], "No module named"),
        (["--engine", "nocolon"], "MODULE:ATTR"),
        (["--model-dir", "/nonexistent/model"], ""),
        (["--port", "70000"], "0..65535"),
    ],
)
def test_bad_options_exit_nonzero_with_a_message(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shakedown", "serve", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "shakedown serve:" in proc.stderr and message in proc.stderr


def test_parser_has_subcommands_others_can_extend() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--port", "0", "--engine", "mocker"])
    assert (args.command, args.port, args.engine) == ("serve", 0, "mocker")
    with pytest.raises(SystemExit):
        parser.parse_args([])


SDK_GATE = """
import os, openai
client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the worker
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
r = client.chat.completions.create(
    model=os.environ["DYN_VALIDATION_MODEL"],
    messages=[{"role": "user", "content": "Weather?"}],
    tools=tools,
    max_tokens=64,
)
assert r.choices[0].message.tool_calls[0].function.name == "get_weather", r
"""


def test_gated_serve_releases_when_its_gate_passes() -> None:
    gates = json.dumps([{"name": "sdk", "exec": [sys.executable, "-c", SDK_GATE]}])
    proc = subprocess.run(
        [sys.executable, "-m", "shakedown", "serve", "--gates", gates],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("OPENAI_BASE_URL=http://127.0.0.1:")
    assert any(line.startswith("worker validation released") for line in lines), proc.stdout


def test_gated_serve_holds_with_the_endpoint_up_and_locked() -> None:
    gates = json.dumps([{"name": "fails", "exec": [sys.executable, "-c", "raise SystemExit(3)"]}])
    with serve("--gates", gates) as (proc, url):
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("held:"):
                break
        # Held for debugging: still serving, but only to holders of the gates' bearer token.
        r = httpx.post(f"{url}/chat/completions", json={"model": "tiny", "messages": MESSAGES})
        assert r.status_code == 401
        assert stop(proc, signal.SIGINT) == 1


def test_tiny_model_is_small_and_has_the_markers_as_single_tokens() -> None:
    from shakedown._core import Pipeline
    from shakedown.cli import TINY_MODEL

    assert sum(p.stat().st_size for p in TINY_MODEL.iterdir()) < 300 * 1024
    pipeline = Pipeline(str(TINY_MODEL))
    for marker in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|eos|>"):
        [token] = pipeline.tokenize(marker)
        assert pipeline.decode([token]) == marker
    assert pipeline.eos_token_ids == pipeline.tokenize("<|eos|>")
    text = 'Grüße, 世界! {"city": "Paris"} 42'
    assert pipeline.decode(pipeline.tokenize(text)) == text


def test_tiny_chat_template_renders_tools_reasoning_and_calls() -> None:
    from shakedown._core import Pipeline
    from shakedown.cli import TINY_MODEL

    pipeline = Pipeline(str(TINY_MODEL))
    body = {
        "model": "tiny",
        "max_tokens": 8,
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Use the tool.",
                "tool_calls": [
                    {
                        "id": "call-1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call-1", "content": "18 C"},
        ],
    }
    request = json.loads(pipeline.chat(json.dumps(body).encode(), "r").engine_request)
    prompt = pipeline.decode(request["token_ids"])
    assert prompt.startswith("<|bos|><|system|>You may call these tools.")
    assert '"name": "get_weather"' in prompt.split("<tools>")[1].split("</tools>")[0]
    assert "<|system|>Be brief.\n<|user|>Weather in Paris?\n" in prompt
    assert (
        '<|assistant|><think>Use the tool.</think><tool_call>{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}</tool_call><|eos|>\n'
    ) in prompt
    assert prompt.endswith("<|tool|><tool_response>18 C</tool_response>\n<|assistant|>")


def test_tiny_model_rebuilds_byte_for_byte(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="the builder needs the tokenizers package")
    from shakedown.cli import TINY_MODEL

    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, str(root / "tools" / "build_tiny_model.py"), str(tmp_path)], check=True
    )
    for shipped in TINY_MODEL.iterdir():
        assert (tmp_path / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name


def test_check_runner_as_the_gate_passes_on_the_real_endpoint(tmp_path: Path) -> None:
    """The newcomer's flow: the reference check runner gates the embedded default."""
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "DYN_WORKER_VALIDATION_GATES": f"exec:{sys.executable} -m shakedown check",
        "DYN_WORKER_VALIDATION_REPORT": str(report),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "shakedown", "serve"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(report.read_text())
    assert result["status"] == "released"
    (gate,) = result["gates"]
    assert gate["outcome"] == "passed" and gate["exit_code"] == 0
    for check in ("tool-call", "reasoning", "chat-stream", "max-tokens", "bad-input"):
        assert f"] {check}" in gate["log_tail"], gate["log_tail"]
    assert "9 passed, 0 failed" in gate["log_tail"]
    assert (tmp_path / "report.xml").read_text().startswith("<?xml")


DIALECT_REPLY = (
    "<think>Two calls.</think>\n"
    '<tool_call>{"name": "launch", "arguments": {}}</tool_call>\n'
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><EOS>'
)


@pytest.mark.parametrize(
    ("dialect", "content", "names"),
    [
        # Dynamo keeps the whitespace between calls and hands out the undeclared call.
        ("dynamo", "\n\n", ["launch", "get_weather"]),
        # vLLM: whitespace-only content beside calls is none.
        ("vllm", None, ["launch", "get_weather"]),
        # SGLang: a call to a tool the request did not declare is dropped.
        ("sglang", "\n\n", ["get_weather"]),
    ],
)
def test_parser_dialect_reaches_the_endpoint(
    tmp_path: Path, dialect: str, content: str | None, names: list[str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"tool": [DIALECT_REPLY]}))
    with serve("--script", str(script), "--parser-dialect", dialect) as (proc, url):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        whole = (
            client.chat.completions.create(
                model="tiny",
                messages=MESSAGES,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                max_tokens=96,
            )
            .choices[0]
            .message
        )
        assert whole.reasoning_content == "Two calls."  # type: ignore[attr-defined]
        assert whole.content == content
        assert [c.function.name for c in whole.tool_calls or []] == names
        streamed_content, streamed_names = "", []
        for chunk in client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            max_tokens=96,
            stream=True,
        ):
            for choice in chunk.choices:
                streamed_content += choice.delta.content or ""
                streamed_names += [
                    c.function.name
                    for c in choice.delta.tool_calls or []
                    if c.function and c.function.name
                ]
        assert streamed_content == (content or "")
        assert streamed_names == names
        stop(proc, signal.SIGTERM)


def test_an_unknown_parser_dialect_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--parser-dialect", "tgi"])
