"""``structured_output``: answers to ``response_format`` requests are JSON, and match the
schema when one is given (``json_schema``). An engine without guided decoding fails here."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import orjson

from ..answers import Answer, chat_answer
from ..context import RunContext
from ..results import CheckFailed, Verdict
from ..schema import schema_problem
from ..suite import CheckSpec

Mode = Literal["json_object", "json_schema"]

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "country": {"type": "string"},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["name", "country", "population"],
    "additionalProperties": False,
}
CITY_PROMPT = (
    "Describe Paris as a JSON object with the keys name, country and population. "
    "Answer with the JSON object only."
)


@dataclass(frozen=True)
class Options:
    modes: list[Mode] = field(default_factory=lambda: ["json_object", "json_schema"])
    schema: dict[str, Any] = field(default_factory=lambda: dict(CITY_SCHEMA))
    messages: list[dict[str, Any]] | None = None
    stream: bool = False
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError("modes must name json_object, json_schema or both")


def response_format(mode: str, schema: dict[str, Any]) -> dict[str, Any]:
    if mode == "json_object":
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }


def run(ctx: RunContext, spec: CheckSpec) -> Verdict:
    options: Options = spec.options
    messages = options.messages or [{"role": "user", "content": CITY_PROMPT}]
    sides = ["unary", "stream"] if options.stream else ["unary"]

    def case(body: dict[str, Any], side: str, mode: str, name: str) -> str:
        answer = chat_answer(ctx.client, body, side == "stream", name)
        return judge(answer, mode, options.schema, name)

    cases = []
    for mode in options.modes:
        body = ctx.request(
            spec,
            defaults={"max_tokens": options.max_tokens},
            messages=messages,
            response_format=response_format(mode, options.schema),
        )
        for side in sides:
            name = f"{mode}/{side}"
            cases.append((name, partial(case, body, side, mode, name)))
    return Verdict.of_cases(ctx.run_cases(cases))


def judge(answer: Answer, mode: str, schema: dict[str, Any], what: str) -> str:
    text = answer.content.strip()
    if answer.finish_reason == "length":
        raise CheckFailed(f"{what}: the answer was cut at max_tokens: {text[:160]!r}")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise CheckFailed(f"{what}: the content is not JSON: {text[:160]!r}") from None
    if not isinstance(value, dict):
        raise CheckFailed(f"{what}: the content is JSON but not an object: {text[:160]!r}")
    if mode == "json_schema":
        problem = schema_problem(value, schema)
        if problem:
            raise CheckFailed(f"{what}: the content does not match the schema: {problem}")
    return f"{what}: a JSON object with {len(value)} keys"
