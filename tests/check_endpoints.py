"""Real endpoints for the check tests: the production loopback endpoint serving the packaged
tiny model through shakedown's mocker (scripted, random, or answering by prompt), and a real
HTTP proxy in front of it that injects one named frontend fault."""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shakedown._core import Pipeline
from shakedown.checks import Settings
from shakedown.cli import TINY_MODEL, make_mocker, model_vocab
from shakedown.endpoint import EngineRegistry, LocalEndpoint, ModelCard, build_pipeline
from shakedown.engines.mocker import Mocker, script_ids

Reply = Callable[[str, dict[str, Any]], str]
EngineFactory = Callable[[Pipeline, Path], Any]


@contextmanager
def loopback(
    engine: EngineFactory | None = None,
    *,
    model_dir: Path = TINY_MODEL,
    served: str = "tiny",
    reasoning_parser: str | None = "deepseek_r1",
    tool_call_parser: str | None = "hermes",
    api_key: str | None = None,
) -> Iterator[LocalEndpoint]:
    """The loopback endpoint on an ephemeral port; ``engine(pipeline, model_dir)`` builds the
    engine (default: the mocker with the default script: reasoning and a tool call)."""
    card = ModelCard(
        str(model_dir),
        served_name=served,
        reasoning_parser=reasoning_parser,
        tool_call_parser=tool_call_parser,
    )
    pipeline = build_pipeline(card)
    factory = engine or scripted()
    registry = EngineRegistry()
    registry.register(card.endpoint, factory(pipeline, model_dir).generate)
    endpoint = LocalEndpoint(card, pipeline, registry, port=0, api_key=api_key).start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def settings(url: str, **fields: Any) -> Settings:
    base: dict[str, Any] = {"base_url": url, "api_key": None, "model": "tiny"}
    return Settings(**(base | fields))


def scripted(script: dict[str, list[str]] | None = None, token_delay: float = 0.0) -> EngineFactory:
    """The mocker; ``script`` replaces the default one ({"tool": [reply]} is the default reply)."""
    return lambda pipeline, model_dir: make_mocker(
        pipeline, model_dir, script=script, token_delay=token_delay
    )


def random_tokens(pipeline: Pipeline, model_dir: Path) -> Mocker:
    """The mocker with no script: random token ids, different on every request, exactly
    ``max_tokens`` of them (as the Dynamo 1.6.1 mocker does)."""
    vocab_size, special = model_vocab(model_dir)
    return Mocker(vocab_size=vocab_size, avoid_ids=special)


class PromptEngine(Mocker):
    """The mocker answering what ``reply(prompt_text, engine_request)`` says; a trailing
    ``<EOS>`` ends the answer with the model's EOS."""

    def __init__(self, pipeline: Pipeline, reply: Reply, token_delay: float = 0.0) -> None:
        super().__init__(token_delay=token_delay)
        self.pipeline = pipeline
        self.reply = reply
        self.prompts: list[str] = []

    def choose(self, request: Any) -> list[int] | None:
        prompt = self.pipeline.decode(list(request["token_ids"]))
        self.prompts.append(prompt)
        eos = self.pipeline.eos_token_ids[0]
        return script_ids(self.reply(prompt, request), self.pipeline.tokenize, eos)


class answering:
    """A factory of ``PromptEngine``s answering with ``reply``; keeps the engines it made."""

    def __init__(self, reply: Reply, token_delay: float = 0.0) -> None:
        self.reply = reply
        self.token_delay = token_delay
        self.engines: list[PromptEngine] = []

    def __call__(self, pipeline: Pipeline, model_dir: Path) -> PromptEngine:
        engine = PromptEngine(pipeline, self.reply, self.token_delay)
        self.engines.append(engine)
        return engine


def last_user_turn(prompt: str) -> str:
    """The last user message of a tiny-template prompt."""
    return prompt.rsplit("<|user|>", 1)[-1].split("\n<|assistant|>", 1)[0]


def thinking_model(tmp: Path) -> Path:
    """The tiny model with a template that honours ``enable_thinking`` the way Qwen3's does:
    turned off, the generation prompt closes an empty think block."""
    out = tmp / "tiny-thinking"
    shutil.copytree(TINY_MODEL, out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = config["chat_template"].replace(
        "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and "
        "not enable_thinking %}<think></think>{% endif %}{% endif %}",
    )
    assert "enable_thinking" in config["chat_template"]
    config_path.write_text(json.dumps(config))
    return out


# --- a proxy that breaks one thing ---------------------------------------------------------

FAULTS = {
    "leak_tool_calls": "streamed tool calls come out as content markup (a broken stream parser)",
    "truncate_arguments": "the last streamed argument delta loses its last character",
    "no_done": "streams end without data: [DONE]",
    "bad_input_500": "4xx answers become 500",
    "ignore_stop": "requests lose their stop strings",
    "ignore_max_tokens": "requests lose max_tokens below 64",
    "model_missing": "GET /models lists nothing",
    "drop_usage": "streamed usage is dropped",
}


class FaultProxy:
    """A real HTTP server on 127.0.0.1 that forwards to ``upstream`` and breaks ``fault``."""

    def __init__(self, upstream: str, fault: str) -> None:
        assert fault in FAULTS, fault
        parts = urlsplit(upstream)
        self.fault = fault
        self.host, self.port_up = parts.hostname or "127.0.0.1", parts.port or 80
        self.prefix = parts.path.rstrip("/")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                proxy.forward(self, self.rfile.read(length))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def forward(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        path = handler.path
        if body is not None:
            body = self.request_body(body)
        conn = http.client.HTTPConnection(self.host, self.port_up, timeout=30)
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "content-length"}
        conn.request(handler.command, path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        status = response.status
        content_type = response.getheader("content-type", "")
        if self.fault == "bad_input_500" and 400 <= status < 500:
            status = 500
        if self.fault == "model_missing" and path.endswith("/models"):
            data = json.dumps({"object": "list", "data": []}).encode()
        if content_type.startswith("text/event-stream"):
            data = self.stream_body(data)
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def request_body(self, body: bytes) -> bytes:
        try:
            data = json.loads(body)
        except ValueError:
            return body
        if self.fault == "ignore_stop":
            data.pop("stop", None)
        if self.fault == "ignore_max_tokens" and data.get("max_tokens", 64) < 64:
            data["max_tokens"] = 64
        return json.dumps(data).encode()

    def stream_body(self, data: bytes) -> bytes:
        events = [e for e in data.decode().split("\n\n") if e.strip()]
        chunks = [e.removeprefix("data: ") for e in events]
        out = []
        argument_deltas = [i for i, c in enumerate(chunks) if c != "[DONE]" and '"arguments"' in c]
        for number, raw in enumerate(chunks):
            if raw == "[DONE]":
                if self.fault != "no_done":
                    out.append(raw)
                continue
            chunk = json.loads(raw)
            if self.fault == "drop_usage":
                chunk.pop("usage", None)
                if not chunk.get("choices"):
                    continue
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                calls = delta.get("tool_calls")
                if self.fault == "leak_tool_calls":
                    if calls:
                        function = calls[0].get("function") or {}
                        text = json.dumps(
                            {"name": function.get("name"), "arguments": function.get("arguments")}
                        )
                        choice["delta"] = {"content": f"<tool_call>{text}</tool_call>"}
                    if choice.get("finish_reason") == "tool_calls":
                        choice["finish_reason"] = "stop"
                if (
                    self.fault == "truncate_arguments"
                    and calls
                    and argument_deltas
                    and number == argument_deltas[-1]
                ):
                    function = calls[0].get("function") or {}
                    function["arguments"] = (function.get("arguments") or "")[:-1]
            out.append(json.dumps(chunk))
        return "".join(f"data: {c}\n\n" for c in out).encode()
