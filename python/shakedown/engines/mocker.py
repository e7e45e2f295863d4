"""A scripted engine shaped like Dynamo 1.6.1's mocker.

Output comes from, in order of preference:
1. a replay row chosen by the request annotation `output_replay_id:SESSION:K`
   (row K, 0-based, among the rows of SESSION), from a replay-trace JSONL file with
   rows `{"session_id", "output_length", "output_token_ids"}` or from scripted texts;
2. the default reply, when one is set and the request names no row;
3. random token ids otherwise (exactly `max_tokens` of them, like the reference).

`max_tokens` is required in every case, as by the reference (`MockerRequestError`, a 400).

Replayed rows are emitted whatever `max_tokens` says (the default script is cut at
it), one token per frame (`generate_batches`: up to `BATCH_OUTPUTS` frames a list when
there is no delay); the last frame has no tokens and `finish_reason: "length"`, so a reply that ends in EOS finishes
as `stop` at the frontend (hidden EOS) and one that doesn't as `length`. Frames
carry the reference mocker's fields, with `completion_usage` on the first and last.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from shakedown._core import ShakedownError
from shakedown.endpoint.context import EngineContext
from shakedown.endpoint.registry import EngineItem

log = logging.getLogger("shakedown.engines.mocker")

REPLAY_PREFIX = "output_replay_id:"
EOS_MARK = "<EOS>"
MAX_TOKENS_REQUIRED = "`max_output_tokens` (or `max_tokens`) is required by the mocker worker"
BATCH_OUTPUTS = 64
"""Outputs per batch when there is no delay: the last batch carries the final frame."""
# The 1.6.1 mocker's random ids, drawn from the DeepSeek vocabulary.
RANDOM_IDS = (1000, 2000)

ReplayTable = dict[str, list[list[int]]]


class MockerError(ShakedownError, ValueError):
    """A request the mocker can't answer, or a trace it can't load."""


class MockerRequestError(MockerError):
    """The request itself is invalid; the endpoint answers with `status`, as Dynamo does."""

    status = 400


def load_replay_trace(path: str | os.PathLike[str]) -> ReplayTable:
    """Rows of a replay-trace JSONL file, grouped by session in file order."""
    table: ReplayTable = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                session = row["session_id"]
                ids = row["output_token_ids"]
                length = row["output_length"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as err:
                raise MockerError(f"{path}:{number}: not a replay row ({err})") from None
            if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids
            ):
                raise MockerError(f"{path}:{number}: output_token_ids must be a list of ids")
            if length != len(ids):
                raise MockerError(
                    f"{path}:{number}: output_length is {length} but there are {len(ids)} ids"
                )
            table.setdefault(str(session), []).append(ids)
    return table


def script_ids(text: str, tokenize: Callable[[str], list[int]], eos_id: int | None) -> list[int]:
    """A scripted text's ids; a trailing `<EOS>` appends the model's EOS id."""
    if text.endswith(EOS_MARK):
        if eos_id is None:
            raise MockerError(f"{text!r} ends with {EOS_MARK} but the model has no EOS id")
        return [*tokenize(text[: -len(EOS_MARK)]), eos_id]
    return tokenize(text)


def script_table(
    script: Mapping[str, Sequence[str]],
    tokenize: Callable[[str], list[int]],
    eos_id: int | None,
) -> ReplayTable:
    """`{"session": ["turn 0 text", ...]}` turned into replay rows."""
    return {
        session: [script_ids(text, tokenize, eos_id) for text in turns]
        for session, turns in script.items()
    }


def random_id_range(vocab_size: int | None) -> tuple[int, int]:
    """The reference's [1000, 2000), narrowed to the upper half of a smaller vocabulary."""
    low, high = RANDOM_IDS
    if vocab_size is None or vocab_size >= high:
        return low, high
    if vocab_size < 2:
        raise MockerError(f"vocab_size {vocab_size} is too small for random tokens")
    return vocab_size // 2, vocab_size


def replay_key(request: Mapping[str, Any]) -> str | None:
    for annotation in request.get("annotations") or ():
        if isinstance(annotation, str) and annotation.startswith(REPLAY_PREFIX):
            return annotation[len(REPLAY_PREFIX) :]
    return None


def _frame(token_ids: list[int], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "token_ids": token_ids,
        "tokens": None,
        "text": None,
        "output_type": "text",
        "cum_log_probs": None,
        "log_probs": None,
        "top_logprobs": None,
        "finish_reason": finish_reason,
        "index": None,
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
    }


def _last_frame(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    last = _frame([], "length")
    last["completion_usage"] = _usage(prompt_tokens, completion_tokens)
    return last


class Mocker:
    """The engine: `await`-free per token unless `token_delay` is set (seconds)."""

    def __init__(
        self,
        *,
        replay: ReplayTable | None = None,
        default: Sequence[int] | None = None,
        vocab_size: int | None = None,
        avoid_ids: Iterable[int] = (),
        token_delay: float = 0.0,
        seed: int | None = None,
    ) -> None:
        if token_delay < 0:
            raise MockerError(f"token_delay must be >= 0, got {token_delay}")
        self.replay: ReplayTable = dict(replay or {})
        self.default = list(default) if default is not None else None
        self.token_delay = token_delay
        self._random_range = random_id_range(vocab_size)
        self._avoid = frozenset(avoid_ids)
        self._rng = random.Random(seed)

    def choose(self, request: Mapping[str, Any]) -> list[int] | None:
        """The scripted ids for `request`, or None for random output."""
        key = replay_key(request)
        if key is not None:
            session, _, turn = key.rpartition(":")
            rows = self.replay.get(session)
            if turn.isdigit() and rows is not None and int(turn) < len(rows):
                return rows[int(turn)]
            log.warning(
                "request asked for output token replay but key was not found replay_key=%r", key
            )
            return None
        return self.default

    def _random_ids(self, max_tokens: int) -> list[int]:
        low, high = self._random_range
        ids: list[int] = []
        while len(ids) < max_tokens:
            token = self._rng.randrange(low, high)
            if token not in self._avoid:
                ids.append(token)
        return ids

    async def generate(
        self, request: dict[str, Any], context: EngineContext
    ) -> AsyncIterator[dict[str, Any]]:
        """One output per item, as the reference mocker sends them (any engine consumer)."""
        async for outputs in self._steps(request, context, 1):
            yield outputs[0]

    async def generate_batches(
        self, request: dict[str, Any], context: EngineContext
    ) -> AsyncIterator[EngineItem]:
        """The same outputs, those ready at once as one list (shakedown's endpoint takes
        lists): with no delay, up to `BATCH_OUTPUTS` a list."""
        async for outputs in self._steps(request, context, BATCH_OUTPUTS):
            yield outputs if len(outputs) > 1 else outputs[0]

    async def _steps(
        self, request: dict[str, Any], context: EngineContext, batch: int
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The outputs in lists of those ready together: one token each when there is a delay
        (the final frame on its own), else up to `batch` (the last list carries the final
        frame)."""
        # Like the reference mocker, before any output and even for a replayed row.
        max_tokens = (request.get("stop_conditions") or {}).get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
            raise MockerRequestError(MAX_TOKENS_REQUIRED)
        ids = self.choose(request)
        if ids is None:
            ids = self._random_ids(max_tokens)
        elif self.default is not None and ids is self.default:
            # A named replay row is emitted whole, as the reference mocker does; the
            # default script stands in for a model, so it honours `max_tokens`.
            ids = ids[:max_tokens]
        prompt_tokens = len(request.get("token_ids") or ())
        delay = self.token_delay
        step = 1 if delay else batch
        for start in range(0, len(ids), step):
            if context.is_stopped():
                last = _frame([], "cancelled")
                last["completion_usage"] = _usage(prompt_tokens, start)
                yield [last]
                return
            if delay:
                await asyncio.sleep(delay)
            outputs = [_frame([token]) for token in ids[start : start + step]]
            if start == 0:
                outputs[0]["completion_usage"] = _usage(prompt_tokens, 1)
            if step > 1 and start + step >= len(ids):
                outputs.append(_last_frame(prompt_tokens, len(ids)))
            yield outputs
        if step == 1 or not ids:
            yield [_last_frame(prompt_tokens, len(ids))]

    __call__ = generate
