"""What every check gets: the endpoint client, the settings, the suite, and shared answers."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import orjson

from .answers import Answer, ok_json, unary_answer
from .client import Client
from .results import CaseResult, CheckFailed, CheckSkipped
from .suite import CheckSpec, Suite

T = TypeVar("T")
R = TypeVar("R")

# The request most checks send: short, deterministic where the engine allows it.
SEA_PROMPT = "Describe the sea in two short sentences."
SEED = 1234


@dataclass(frozen=True)
class Settings:
    """How to reach the endpoint and what the worker is configured to do."""

    base_url: str
    api_key: str | None
    model: str | None
    timeout_s: float = 60.0
    # None: the suite's max_tokens.
    max_tokens: int | None = None
    expect_reasoning: bool = False
    expect_tools: bool = False
    # None: the suite says whether the engine is deterministic.
    deterministic: bool | None = None


ProgressUpdate = Callable[[int, int, int], None]
"""(cases done, cases in all, cases passed so far)"""


@dataclass
class RunContext:
    client: Client
    settings: Settings
    suite: Suite
    _model: str = ""
    update: ProgressUpdate = lambda done, total, passed: None
    # Unary chat answers by request body: checks that send the same request share one answer.
    _unary: dict[bytes, Answer] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def model(self) -> str:
        """The model under test: the configured one, else the first one listed."""
        if not self._model:
            self._model = self.settings.model or ""
        if not self._model:
            data = ok_json(self.client.get("/models"), "GET /models")
            entries = data.get("data")
            ids = [e.get("id") for e in entries or [] if isinstance(e, dict)]
            if not ids or not isinstance(ids[0], str):
                raise CheckFailed("GET /models lists no model and DYN_VALIDATION_MODEL is not set")
            self._model = ids[0]
        return self._model

    def use_model(self, model: str) -> None:
        self._model = model

    @property
    def deterministic(self) -> bool:
        if self.settings.deterministic is not None:
            return self.settings.deterministic
        return self.suite.deterministic

    @property
    def max_tokens(self) -> int:
        return self.settings.max_tokens or self.suite.max_tokens

    def expects(self, requirement: str | None) -> bool:
        return {
            None: True,
            "reasoning_parser": self.settings.expect_reasoning,
            "tool_call_parser": self.settings.expect_tools,
        }[requirement]

    def request(
        self, spec: CheckSpec, defaults: Mapping[str, Any] | None = None, **fields: Any
    ) -> dict[str, Any]:
        """A request body: the model and defaults, then the suite's and the check's
        ``extra_body``, then what the check itself must set (``fields``)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "seed": SEED,
        }
        body.update(defaults or {})
        body.update(self.suite.extra_body)
        body.update(spec.extra_body)
        body.update(fields)
        return body

    def run_cases(self, cases: Sequence[tuple[str, Callable[[], str]]]) -> list[CaseResult]:
        """Each ``(name, judge)`` in turn: the judge's return is the pass reason, a
        ``CheckFailed``/``CheckSkipped`` its failure or skip; progress is reported after each."""
        results: list[CaseResult] = []
        for name, judge in cases:
            start = time.monotonic()
            try:
                result = CaseResult(name, "passed", 0.0, judge())
            except CheckFailed as exc:
                result = CaseResult(name, "failed", 0.0, str(exc))
            except CheckSkipped as exc:
                result = CaseResult(name, "skipped", 0.0, str(exc))
            results.append(replace(result, duration_s=time.monotonic() - start))
            self.update(len(results), len(cases), sum(c.outcome == "passed" for c in results))
        return results

    def unary_chat(self, body: dict[str, Any], what: str) -> Answer:
        """The unary answer to ``body`` (shared: the same body is sent once per run)."""
        key = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        with self._lock:
            cached = self._unary.get(key)
        if cached is not None:
            return cached
        answer = unary_answer(ok_json(self.client.post("/chat/completions", body), what), what)
        with self._lock:
            self._unary[key] = answer
        return answer


def run_bounded(
    items: Iterable[T],
    work: Callable[[T], R],
    concurrency: int,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[tuple[T, R]]:
    """``work`` over ``items`` with at most ``concurrency`` in flight, yielding (item, result)
    as each finishes. Once ``stop()`` is true no new item starts; those in flight finish
    (each request has its own timeout), and every thread is joined before this returns."""
    pending: dict[concurrent.futures.Future[R], T] = {}
    source = iter(items)
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, concurrency), thread_name_prefix="shakedown-check"
    ) as pool:

        def refill() -> None:
            while len(pending) < concurrency and not stop():
                try:
                    item = next(source)
                except StopIteration:
                    return
                pending[pool.submit(work, item)] = item

        refill()
        while pending:
            done, _ = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                item = pending.pop(future)
                yield item, future.result()
            refill()
