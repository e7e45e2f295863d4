"""DYN_WORKER_VALIDATION_* parsing: every bad value is a clear error (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shakedown.validation import (
    ExecGate,
    Hold,
    UrlGate,
    ValidationConfig,
    ValidationConfigError,
    parse_gates,
)


def test_unset_or_empty_means_no_validation() -> None:
    assert not ValidationConfig.from_env({}).enabled
    assert not ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": ""}).enabled


def test_blank_gates_are_an_error_not_validation_off() -> None:
    with pytest.raises(ValidationConfigError, match="DYN_WORKER_VALIDATION_GATES is set but blank"):
        ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": " \t\n"})


def test_json_gates() -> None:
    gates = parse_gates(
        '[{"name": "checks", "exec": ["shakedown", "check"], "timeout_s": 30, "env": {"A": "1"}},'
        ' {"name": "sidecar", "url": "http://127.0.0.1:9000/validate"}]'
    )
    assert gates == (
        ExecGate(name="checks", argv=("shakedown", "check"), timeout_s=30.0, env={"A": "1"}),
        UrlGate(name="sidecar", url="http://127.0.0.1:9000/validate"),
    )


def test_shorthand_is_shell_split_and_quote_aware() -> None:
    gates = parse_gates(
        "exec:shakedown check --x 'a;b' ; url:http://127.0.0.1:1/v?a=1&b=2;exec: true"
    )
    assert gates == (
        ExecGate(name="shakedown check --x 'a;b'", argv=("shakedown", "check", "--x", "a;b")),
        UrlGate(name="http://127.0.0.1:1/v?a=1&b=2", url="http://127.0.0.1:1/v?a=1&b=2"),
        ExecGate(name="true", argv=("true",)),
    )


def test_bracketed_ipv6_and_https_urls() -> None:
    gates = parse_gates(
        '[{"name": "v6", "url": "http://[::1]:9000/validate", "timeout_s": 5},'
        ' {"name": "tls", "url": "https://evals.example:8443/v"},'
        ' {"name": "named", "url": "http://localhost:9000/v"}]'
    )
    assert [g.url for g in gates if isinstance(g, UrlGate)] == [
        "http://[::1]:9000/validate",
        "https://evals.example:8443/v",
        "http://localhost:9000/v",
    ]


def test_exec_gate_environment_keys() -> None:
    [gate] = parse_gates(
        '[{"name": "e", "exec": ["a"], "pass_env": ["HF_TOKEN"], "inherit_env": true}]'
    )
    assert gate == ExecGate("e", ("a",), pass_env=("HF_TOKEN",), inherit_env=True)
    assert not ValidationConfig.from_env({}).inherit_env
    assert ValidationConfig.from_env({"DYN_WORKER_VALIDATION_INHERIT_ENV": "1"}).inherit_env


def test_repeated_shorthand_gates_get_unique_names() -> None:
    assert [g.name for g in parse_gates("exec:true;exec:true")] == ["true", "true#2"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("[", "not valid JSON"),
        ('{"name": "x"}', "each gate must start with"),
        ('[{"name": "x", "exec": ["a"], "url": "http://h/"}]', "exactly one of"),
        ('[{"name": "x", "exec": []}]', "non-empty array"),
        ('[{"name": "x", "exec": ["a"], "timeout": 3}]', "unknown keys: timeout"),
        ('[{"name": "x", "exec": ["a"], "timeout_s": 0}]', "positive"),
        ('[{"name": "x", "exec": ["a"], "timeout_s": true}]', "number of seconds"),
        ('[{"name": "x", "url": "ftp://h/"}]', "not an http(s) URL"),
        ('[{"name": "x", "url": "http://127.0.0.1/", "env": {}}]', "exec gates only"),
        ('[{"name": "x", "url": "https://h/", "pass_env": []}]', "exec gates only"),
        ('[{"name": "x", "url": "http://127.0.0.1:99999/v"}]', "bad port: Port out of range"),
        ('[{"name": "x", "url": "http://127.0.0.1:abc/v"}]', "bad port"),
        ('[{"name": "x", "url": "http://127.0.0.1:0/v"}]', "bad port: 0"),
        ('[{"name": "x", "url": "http://::1:80/v"}]', "must be in brackets"),
        ('[{"name": "x", "url": "http://[::1/v"}]', "is not a URL: Invalid IPv6"),
        ('[{"name": "x", "url": "http://127.0.0.1/\\u0000"}]', "NUL byte"),
        ('[{"name": "x", "url": "http://10.0.0.5:9000/v"}]', "plain http to a host"),
        ('[{"name": "x", "url": "http://sidecar:9000/v"}]', "use https"),
        ('[{"name": "x", "exec": ["a", "b\\u0000c"]}]', "exec[1] contains a NUL byte"),
        ('[{"name": "x", "exec": ["a"], "env": {"A": "b\\u0000"}}]', "env['A'] contains a NUL"),
        ('[{"name": "x", "exec": ["a"], "env": {"A=B": "c"}}]', "'A=B' is not an environment"),
        ('[{"name": "x", "exec": ["a"], "env": {"": "c"}}]', "'' is not an environment"),
        ('[{"name": "x", "exec": ["a"], "pass_env": "HF_TOKEN"}]', "pass_env must be an array"),
        ('[{"name": "x", "exec": ["a"], "pass_env": ["A=B"]}]', "'A=B' is not an environment"),
        ('[{"name": "x", "exec": ["a"], "inherit_env": "yes"}]', "inherit_env must be true"),
        ('[{"name": "x", "exec": ["a"], "env": {"OPENAI_BASE_URL": "u"}}]', "may not set"),
        ('[{"name": "x", "exec": ["a"]}, {"name": "x", "exec": ["b"]}]', "two gates are named"),
        ('[{"exec": ["a"]}]', "non-empty string 'name'"),
        ("[]", "names no gate"),
        ("shell:true", "each gate must start with"),
        ("exec:", "needs a command"),
        ("url:http://127.0.0.1/ http://b/", "exactly one URL"),
        ("url:http://127.0.0.1:99999/v", "bad port"),
        ("url:http://127.0.0.1:abc/v", "bad port"),
        ("url:http://sidecar:9000/v", "plain http"),
        ("exec:true\0x", "contains a NUL byte"),
        ("exec:echo 'unterminated", "cannot split"),
    ],
)
def test_bad_gates_are_clear_errors(value: str, words: str) -> None:
    with pytest.raises(ValidationConfigError, match=r"DYN_WORKER_VALIDATION_GATES") as err:
        ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": value})
    assert words in str(err.value)


def test_other_settings() -> None:
    config = ValidationConfig.from_env(
        {
            "DYN_WORKER_VALIDATION_GATES": "exec:true",
            "DYN_WORKER_VALIDATION_PARALLEL": "yes",
            "DYN_WORKER_VALIDATION_LOCAL_PORT": "8123",
            "DYN_WORKER_VALIDATION_HOLD": "Health",
            "DYN_WORKER_VALIDATION_TIMEOUT_S": "90.5",
            "DYN_WORKER_VALIDATION_REPORT": "/tmp/r.json",
            "DYN_ENABLE_RL": "1",
        }
    )
    assert config.parallel and config.enable_rl
    assert (config.local_port, config.hold, config.timeout_s) == (8123, Hold.HEALTH, 90.5)
    assert config.report_path == Path("/tmp/r.json")
    defaults = ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:true"})
    assert (defaults.local_port, defaults.hold, defaults.timeout_s) == (0, Hold.CARD, None)
    assert not defaults.parallel and not defaults.enable_rl


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("DYN_WORKER_VALIDATION_LOCAL_PORT", "70000"),
        ("DYN_WORKER_VALIDATION_LOCAL_PORT", "-1"),
        ("DYN_WORKER_VALIDATION_HOLD", "discovery"),
        ("DYN_WORKER_VALIDATION_TIMEOUT_S", "soon"),
        ("DYN_WORKER_VALIDATION_TIMEOUT_S", "-5"),
        ("DYN_WORKER_VALIDATION_PARALLEL", "maybe"),
        ("DYN_ENABLE_RL", "2"),
        ("DYN_WORKER_VALIDATION_INHERIT_ENV", "all"),
        ("DYN_WORKER_VALIDATION_REPORT", "/tmp/r\0.json"),
    ],
)
def test_bad_settings_are_clear_errors(var: str, value: str) -> None:
    with pytest.raises(ValidationConfigError, match=var):
        ValidationConfig.from_env({"DYN_WORKER_VALIDATION_GATES": "exec:true", var: value})
