"""Suite files (TOML and JSON), their errors, the example suites in docs/, and the statistics
and schema subset the checks judge by."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from shakedown.checks import SuiteError, default_suite, load_suite
from shakedown.checks.runner import ordered
from shakedown.checks.schema import schema_problem
from shakedown.checks.stats import Decision, percentile, wilson_bounds, z_one_sided
from shakedown.checks.suite import DEFAULT_SUITE_TABLE

DOCS = Path(__file__).resolve().parent.parent / "docs" / "suites"
needs_toml = pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")


@needs_toml
@pytest.mark.parametrize("name", ["chat", "reasoning", "tool-calling", "default"])
def test_example_suites_load(name: str) -> None:
    suite = load_suite(DOCS / f"{name}.toml")
    assert suite.checks
    assert len({c.name for c in suite.checks}) == len(suite.checks)


@needs_toml
def test_the_documented_default_suite_is_the_built_in_one() -> None:
    import tomllib

    assert tomllib.loads((DOCS / "default.toml").read_text()) == DEFAULT_SUITE_TABLE
    documented = load_suite(DOCS / "default.toml")
    assert documented.checks == default_suite().checks


def test_json_suite_same_keys(tmp_path: Path) -> None:
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({
        "name": "j", "deterministic": True, "max_tokens": 32, "extra_body": {"top_p": 0.9},
        "check": [{"kind": "consistency", "extra_body": {"seed": 7}},
                  {"kind": "warmup", "requests": 2}],
    }))  # fmt: skip
    suite = load_suite(path)
    assert (suite.name, suite.deterministic, suite.max_tokens) == ("j", True, 32)
    assert suite.extra_body == {"top_p": 0.9}
    assert suite.checks[0].extra_body == {"seed": 7}
    # warm-up runs first whatever its place in the file
    assert [c.kind for c in ordered(suite)] == ["warmup", "consistency"]


def test_toml_on_python_310_says_to_use_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[[check]]\nkind = "conformance"\n')
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    with pytest.raises(
        SuiteError, match=r"TOML suites need Python 3.11\+.*as JSON in a .json file"
    ):
        load_suite(path)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"check": []}, "no checks"),
        ({"checks": [{"kind": "conformance"}]}, "unknown key(s) checks"),
        ({"check": [{"kind": "vibes"}]}, "check 1: kind 'vibes' is not one of warmup, conformance"),
        (
            {"check": [{"kind": "latency", "requests": "10"}]},
            "check 1 (latency): requests: must be an integer",
        ),
        (
            {"check": [{"kind": "conformance", "items": ["models", "nope"]}]},
            "items[1]: must be one of",
        ),
        (
            {"check": [{"kind": "tool_calls", "cases": "builtin:weather.jsonl", "threshold": 2}]},
            "threshold must be in (0, 1]",
        ),
        ({"check": [{"kind": "tool_calls"}]}, "missing 1 required"),
        (
            {"check": [{"kind": "tool_calls", "cases": "builtin:nope.jsonl"}]},
            "no builtin:nope.jsonl; shipped: builtin:basics.jsonl",
        ),
        (
            {"check": [{"kind": "accuracy", "dataset": "builtin:basics.jsonl"}]},
            "set min_pass_rate, a reference endpoint, or both",
        ),
        (
            {
                "check": [
                    {
                        "kind": "accuracy",
                        "dataset": "builtin:basics.jsonl",
                        "min_pass_rate": 0.5,
                        "confidence": 1,
                    }
                ]
            },
            "confidence must be in [0.5, 1)",
        ),
        ({"check": [{"kind": "conformance"}, {"kind": "conformance"}]}, "repeated: conformance"),
        ({"check": [{"kind": "reasoning", "requires": "gpu"}]}, "requires: must be one of"),
        ({"check": [{"kind": "latency", "min_goodput": 0.9}]}, "min_goodput needs slo_ttft_ms"),
    ],
)
def test_suite_errors_say_where(tmp_path: Path, table: dict[str, object], message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(table))
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_bad_case_rows_fail_at_load_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text(
        '# a comment\n{"messages": [{"role": "user", "content": "hi"}], "tools": [{}], '
        '"expect": {"name": "f", "argument_patterns": {"x": "("}}}\n'
    )
    (tmp_path / "s.json").write_text(
        json.dumps({"check": [{"kind": "tool_calls", "cases": "cases.jsonl"}]})
    )
    with pytest.raises(
        SuiteError, match=r"check 1 \(tool_calls\): cases.jsonl:2: argument_patterns.x"
    ):
        load_suite(tmp_path / "s.json")
    (tmp_path / "d.jsonl").write_text('{"prompt": "2+2", "answer": "four", "matcher": "number"}\n')
    (tmp_path / "a.json").write_text(json.dumps(
        {"check": [{"kind": "accuracy", "dataset": "d.jsonl", "min_pass_rate": 0.5}]}))  # fmt: skip
    with pytest.raises(SuiteError, match=r"d.jsonl:1: the answer 'four' is not a number"):
        load_suite(tmp_path / "a.json")


def test_missing_suite_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="cannot read the suite"):
        load_suite(tmp_path / "nope.toml")


# --- statistics ----------------------------------------------------------------------------


def score(rate: float, p: float, n: int) -> float:
    """The score statistic of a true rate ``p`` given an observed ``rate`` over ``n``."""
    return abs(rate - p) / math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(("passed", "total"), [(1, 10), (5, 10), (32, 40), (80, 100), (997, 1000)])
def test_wilson_bounds_are_where_the_score_test_is_at_z(passed: int, total: int) -> None:
    # The definition of the Wilson interval: its ends are the rates p whose score
    # statistic |rate - p| / sqrt(p(1-p)/n) equals z.
    z = z_one_sided(0.95)
    lower, upper = wilson_bounds(passed, total, 0.95)
    assert lower < passed / total < upper
    assert score(passed / total, lower, total) == pytest.approx(z)
    assert score(passed / total, upper, total) == pytest.approx(z)


def test_wilson_bounds_closed_forms() -> None:
    z2 = z_one_sided(0.95) ** 2
    assert z_one_sided(0.95) == pytest.approx(1.6448536)
    # all right: lower = n / (n + z^2); none right: upper = z^2 / (n + z^2)
    assert wilson_bounds(40, 40, 0.95)[0] == pytest.approx(40 / (40 + z2))
    assert wilson_bounds(0, 10, 0.95) == (0.0, pytest.approx(z2 / (10 + z2)))
    assert wilson_bounds(0, 0, 0.95) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_bounds(3, 2, 0.95)


def test_decisions_are_final() -> None:
    # Decided pass: even if every remaining row fails, the full-set bound reaches the threshold.
    assert Decision(30, 30, 40, 0.6, 0.95).verdict is True
    assert Decision(29, 29, 40, 0.6, 0.95).verdict is None
    # Decided fail: even if every remaining row passes, it cannot.
    assert Decision(0, 1, 40, 0.9, 0.95).verdict is False
    assert Decision(0, 0, 40, 0.95, 0.95).verdict is False
    assert Decision(1, 1, 40, 0.9, 0.95).verdict is None
    # Once decided, no further row changes it (monotone in passes).
    for passed in range(0, 11):
        decision = Decision(passed, 10, 10, 0.5, 0.95)
        assert decision.verdict is (decision.lower >= 0.5)


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([5.0, 1.0], 0) == 1.0


def test_schema_problem() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 2},
            "unit": {"enum": ["c", "f"]},
            "days": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 3},
            "where": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert schema_problem({"city": "Paris", "days": [1, 2.0], "where": None}, schema) is None
    assert schema_problem({}, schema) == "$ is missing required 'city'"
    assert schema_problem({"city": 3}, schema) == "$.city should be string, got integer"
    assert (
        schema_problem({"city": "P"}, schema) == "$.city should have at least 2 characters, got 1"
    )
    assert (
        schema_problem({"city": "xy", "unit": "k"}, schema)
        == "$.unit should be one of ['c', 'f'], got 'k'"
    )
    assert schema_problem({"city": "xy", "days": [0]}, schema) == "$.days[0] should be >= 1, got 0"
    assert schema_problem({"city": "xy", "days": [1, 1, 1, 1]}, schema) is not None
    assert schema_problem({"city": "xy", "where": 1}, schema) == (
        "$.where matches none of anyOf: $.where should be string, got integer"
    )
    assert schema_problem({"city": "xy", "extra": 1}, schema) == "$ has unexpected property 'extra'"
    assert schema_problem(True, {"type": "integer"}) == "$ should be integer, got boolean"
