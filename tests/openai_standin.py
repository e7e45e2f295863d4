"""A tiny real OpenAI-style HTTP server on 127.0.0.1 for the validation and check-runner tests.

It stands in for the loopback endpoint (same surface: start/stop/port/registry, bearer token,
503 until the engine registers) and for any OpenAI endpoint the check runner may face. Its
"model" is a fixed deterministic text, cut by max_tokens and stop sequences the way an engine
would; ``faults`` makes it misbehave in one named way so each check is shown to catch it.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "The sea is vast and deep. Waves roll in from far away, and gulls cry overhead."
REASONING = "The user asks about the sea, so I describe it briefly."
TOOL_ANSWER = "It is 18 degrees and sunny in Paris."


def tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


class Registry:
    def __init__(self) -> None:
        self.engines: dict[str, Any] = {}
        self.lock = threading.Lock()

    def register(self, name: str, engine: Any) -> None:
        with self.lock:
            self.engines[name] = engine

    def unregister(self, name: str) -> None:
        with self.lock:
            self.engines.pop(name, None)


class StandInEndpoint:
    def __init__(
        self,
        model: str = "standin",
        *,
        port: int = 0,
        api_key: str | None = None,
        reasoning: bool = False,
        faults: frozenset[str] = frozenset(),
        registered: bool = False,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.reasoning = reasoning
        self.faults = faults
        self.registry = Registry()
        if registered:
            self.registry.register(model, object())
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[tuple[str, str]] = []
        self.stopped = False

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def register_engine(self, engine: Any) -> None:
        self.registry.register(self.model, engine)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        self._server = ThreadingHTTPServer(("127.0.0.1", self._requested_port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self.stopped = True


def error(status: int, kind: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"message": message, "type": kind, "code": status}


class _Handler(BaseHTTPRequestHandler):
    owner: StandInEndpoint
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        owner = self.owner
        owner.requests.append((method, self.path))
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if owner.api_key is not None and self.headers.get("authorization") != (
            f"Bearer {owner.api_key}"
        ):
            self._send_json(*error(401, "Unauthorized", "Invalid or missing bearer token"))
            return
        if owner.model not in owner.registry.engines:
            self._send_json(*error(503, "Service Unavailable", "Service is not ready"))
            return
        if method == "GET" and self.path == "/v1/models":
            listed = [] if "model_missing" in owner.faults else [owner.model]
            data = [{"id": m, "object": "model", "owned_by": "nvidia"} for m in listed]
            self._send_json(200, {"object": "list", "data": data})
            return
        if method != "POST" or self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_json(*error(404, "Not Found", f"Route not found: {method} {self.path}"))
            return
        try:
            request = json.loads(raw)
        except ValueError:
            status = 500 if "bad_input_500" in owner.faults else 400
            self._send_json(*error(status, "Bad Request", "Failed to deserialize the JSON body"))
            return
        problem = self._validate(request)
        if problem:
            status = 500 if "bad_input_500" in owner.faults else 400
            self._send_json(*error(status, "Bad Request", problem))
            return
        if self.path == "/v1/completions":
            self._completions(request)
        else:
            self._chat(request)

    def _validate(self, request: Any) -> str | None:
        if not isinstance(request, dict) or "model" not in request:
            return "missing field `model`"
        if request["model"] != self.owner.model:
            return "Model not found"
        if self.path == "/v1/chat/completions":
            if "messages" not in request:
                return "missing field `messages`"
            if not request["messages"]:
                return "Validation: The 'messages' field cannot be empty."
        return None

    def _generate(self, request: dict[str, Any], text: str) -> tuple[str, str]:
        faults = self.owner.faults
        pieces = tokens(text)
        limit = request.get("max_tokens")
        truncated = False
        if isinstance(limit, int) and limit < len(pieces) and "ignore_max_tokens" not in faults:
            pieces, truncated = pieces[:limit], True
        out = "".join(pieces)
        stops = request.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        if "ignore_stop" not in faults:
            hits = [out.find(s) for s in stops if s in out]
            if hits:
                return out[: min(hits)], "stop"
        return out, "length" if truncated else "stop"

    def _chat(self, request: dict[str, Any]) -> None:
        owner = self.owner
        faults = owner.faults
        messages = request["messages"]
        tools = request.get("tools")
        reasoning = REASONING if owner.reasoning else None
        tool_call = None
        if messages[-1].get("role") == "tool":
            content, finish = self._generate(request, TOOL_ANSWER)
        elif tools and "weather" in str(messages[-1].get("content")):
            args = '{"city": "Paris"' if "tool_args_invalid" in faults else '{"city": "Paris"}'
            tool_call = {
                "id": "call-" + uuid.uuid4().hex[:8],
                "type": "function",
                "function": {"name": "get_weather", "arguments": args},
            }
            content, finish = "", "tool_calls"
        else:
            content, finish = self._generate(request, ANSWER)
        if owner.reasoning and "reasoning_in_content" in faults:
            content, reasoning = f"<think>{REASONING}</think>{content}", None
        if request.get("stream"):
            self._chat_stream(content, reasoning, tool_call, finish)
            return
        message: dict[str, Any] = {
            "content": content or None,
            "refusal": None,
            "role": "assistant",
            "reasoning_content": reasoning,
        }
        if tool_call:
            message["tool_calls"] = [tool_call]
        completion_tokens = max(1, len(tokens(content)))
        self._send_json(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": owner.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": 5,
                    "completion_tokens": completion_tokens,
                    "total_tokens": 5 + completion_tokens,
                },
            },
        )

    def _chat_stream(
        self, content: str, reasoning: str | None, tool_call: Any, finish: str
    ) -> None:
        faults = self.owner.faults
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            body = {
                "id": "chatcmpl-2",
                "object": "chat.completion.chunk",
                "model": self.owner.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            self._write_chunk(b"data: " + json.dumps(body).encode() + b"\n\n")

        chunk({"role": "assistant", "content": ""})
        for piece in tokens(reasoning or ""):
            chunk({"reasoning_content": piece})
        if "stream_mismatch" in faults:
            content = content.upper()
        for piece in tokens(content):
            chunk({"content": piece})
        if tool_call:
            args = tool_call["function"]["arguments"]
            first = {"index": 0, "id": tool_call["id"], "type": "function"}
            first["function"] = {"name": "get_weather", "arguments": args[:5]}
            chunk({"tool_calls": [first]})
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[5:]}}]})
        chunk({}, finish)
        if "no_done" not in faults:
            self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _completions(self, request: dict[str, Any]) -> None:
        text, finish = self._generate(request, " Paris, a city on the Seine.")
        self._send_json(
            200,
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": self.owner.model,
                "choices": [{"text": text, "index": 0, "finish_reason": finish}],
            },
        )
