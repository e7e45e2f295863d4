"""The parity runner on its own: case files, masking, diffs and exit codes, against two small
local HTTP servers whose answers each test sets."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shakedown.parity import CaseError, Response, load_cases, parse_cases
from shakedown.parity.cases import requests_for
from shakedown.parity.normalize import normalized_lines
from shakedown.parity.runner import main

UNARY = (
    b'{"id":"chatcmpl-1b2c3d4e-0000-4000-8000-000000000000","choices":[{"index":0,"message":'
    b'{"content":"Gr\xc3\xbc\xc3\x9fe","tool_calls":[{"id":"call-9f8e7d6c-1111-4111-8111-'
    b'111111111111","type":"function"}]}}],"created":1796215888,"model":"m"}'
)


class Canned(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's (status, headers, body)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        status, headers, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def servers() -> Iterator[list[http.server.ThreadingHTTPServer]]:
    pair = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canned) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True) for s in pair]
    for s, t in zip(pair, threads, strict=True):
        s.answer = (200, {"content-type": "application/json"}, UNARY)  # type: ignore[attr-defined]
        t.start()
    yield pair
    for s in pair:
        s.shutdown()
        s.server_close()


def _url(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _cases(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text(text)
    return path


ONE = '{"name": "one", "body": {"model": "$MODEL", "messages": []}, "modes": ["unary"]}\n'


def test_ids_and_created_are_masked_and_nothing_else() -> None:
    other = UNARY.replace(b"1b2c3d4e", b"aaaaaaaa").replace(b"9f8e7d6c", b"bbbbbbbb")
    other = other.replace(b"1796215888", b"1796215999")
    headers = {"content-type": "application/json"}
    a = normalized_lines(Response(200, headers, UNARY))
    assert normalized_lines(Response(200, headers, other)) == a
    assert '"id":"chatcmpl-<id>"' in a[-1] and '"id":"call-<id>"' in a[-1]
    assert '"created":0' in a[-1]
    escaped = UNARY.replace("ü".encode(), b"\\u00fc")
    assert normalized_lines(Response(200, headers, escaped)) != a


def test_case_paths_mask_named_fields_in_every_sse_event() -> None:
    body = b'data: {"usage":{"n":1},"x":[{"t":1},{"t":2}]}\n\ndata: [DONE]\n\n'
    lines = normalized_lines(
        Response(200, {"content-type": "text/event-stream"}, body), ["usage.n", "x.*.t"]
    )
    assert lines[-2:] == [
        'data: {"usage":{"n":"<normalized>"},"x":[{"t":"<normalized>"},{"t":"<normalized>"}]}',
        "data: [DONE]",
    ]


def test_stream_mode_adds_stream_and_extra_keys_last() -> None:
    (case,) = parse_cases(
        ['{"name": "c", "body": {"model": "$MODEL", "n": 1}, "stream_extra": {"so": 1}}'], "t"
    )
    unary, stream = list(requests_for(case, "m"))
    assert unary.body == b'{"model":"m","n":1}'
    assert stream.body == b'{"model":"m","n":1,"so":1,"stream":true}'
    assert stream.headers == {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1]", "a case is a JSON object"),
        ('{"name": "x", "bogus": 1}', "unknown key"),
        ('{"name": "x", "raw": "{", "body": {}}', "not both"),
        ('{"name": "x", "raw": "{", "modes": ["stream"]}', "stream mode needs"),
        ('{"name": "x", "path": "v1"}', "must start with /"),
        ("{nope", "not JSON"),
    ],
)
def test_bad_cases_say_where_and_why(line: str, message: str) -> None:
    with pytest.raises(CaseError, match=message) as err:
        parse_cases([line], "f.jsonl")
    assert str(err.value).startswith("f.jsonl:1:")


def test_duplicate_names_and_empty_files_are_errors() -> None:
    with pytest.raises(CaseError, match="duplicate"):
        parse_cases(['{"name": "x"}', '{"name": "x"}'], "f")
    with pytest.raises(CaseError, match="no cases"):
        parse_cases(["# only a comment", ""], "f")


def test_the_default_set_loads() -> None:
    assert len(load_cases()) >= 30


def test_identical_answers_exit_0(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = servers
    b.answer = (200, {"content-type": "application/json"}, UNARY.replace(b"1b2c", b"ffff"))  # type: ignore[attr-defined]
    code = main(["--a", _url(a), "--b", _url(b) + "/v1", "--model", "m",
                           "--cases", str(_cases(tmp_path, ONE))])  # fmt: skip
    assert code == 0
    assert "1/1 requests identical" in capsys.readouterr().out


def test_shakedown_cli_has_the_parity_command(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shakedown.cli import main as shakedown_main

    a, b = servers
    code = shakedown_main(["parity", "--a", _url(a), "--b", _url(b), "--model", "m",
                           "--cases", str(_cases(tmp_path, ONE))])  # fmt: skip
    assert code == 0
    assert "1/1 requests identical" in capsys.readouterr().out


def test_a_different_field_exits_1_with_a_field_diff(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = servers
    b.answer = (
        200,
        {"content-type": "application/json"},
        UNARY.replace(b'"model":"m"', b'"model":"n"'),
    )  # type: ignore[attr-defined]
    code = main(["--a", _url(a), "--b", _url(b), "--model", "m",
                           "--cases", str(_cases(tmp_path, ONE))])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "=== MISMATCH one [unary]" in out
    assert '-  "model": "m"' in out and '+  "model": "n"' in out


def test_status_and_content_type_count(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = servers
    b.answer = (200, {"content-type": "application/json; charset=utf-8"}, UNARY)  # type: ignore[attr-defined]
    args = ["--a", _url(a), "--b", _url(b), "--model", "m", "--cases", str(_cases(tmp_path, ONE))]
    assert main(args) == 1
    assert "+content-type: application/json; charset=utf-8" in capsys.readouterr().out
    b.answer = (201, {"content-type": "application/json"}, UNARY)  # type: ignore[attr-defined]
    assert main(args) == 1
    assert "+HTTP 201" in capsys.readouterr().out


def test_unreachable_endpoint_exits_1(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, _ = servers
    closed = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    dead = _url(closed)
    closed.server_close()
    args = ["--a", _url(a), "--b", dead, "--model", "m", "--cases", str(_cases(tmp_path, ONE))]
    assert main(args) == 1
    assert "ERR  one [unary]" in capsys.readouterr().out


def test_model_defaults_to_a_first_listed_model(
    servers: list[http.server.ThreadingHTTPServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = servers
    listing = (200, {"content-type": "application/json"}, b'{"object":"list","data":[{"id":"zz"}]}')
    a.answer = b.answer = listing  # type: ignore[attr-defined]
    case = '{"name": "m", "method": "GET", "path": "/v1/models"}\n'
    args = ["--a", _url(a), "--b", _url(b), "--cases", str(_cases(tmp_path, case))]
    assert main(args) == 0
    assert "ok   m [unary]" in capsys.readouterr().out
