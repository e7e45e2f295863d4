"""Real local sidecars and process checks shared by the validation tests."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def py(code: str) -> list[str]:
    """argv for a gate that runs ``code`` in this interpreter."""
    return [sys.executable, "-c", code]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_gone(pid: int) -> bool:
    """Dead or a zombie (killed, waiting for a parent that is not us to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_for_file(path: Path, timeout_s: float = 5.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} never written")


class Sidecar:
    """A URL-gate sidecar: records each POSTed JSON body and answers ``status``."""

    def __init__(self, status: int = 200, port: int = 0) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        sidecar = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                sidecar.bodies.append(json.loads(self.rfile.read(length)))
                body = b'{"ok": true}' if sidecar.status == 200 else b"chat template is wrong"
                self.send_response(sidecar.status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/validate"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
