"""A scripted engine shaped like Dynamo 1.6.1's mocker.

Output comes from, in order of preference:
1. a replay row chosen by the request annotation `output_replay_id:SESSION:K`
   (row K, 0-based, among the rows of SESSION), from a replay-trace JSONL file with
   rows `{"session_id", "output_length", "output_token_ids"}` or from scripted texts;
2. the default reply, when one is set and the request names no row;
3. random token ids otherwise (exactly `max_tokens` of them, like the reference).

`max_tokens` is required in every case, as by the reference (`MockerRequestError`, a 400).

Replayed rows are emitted whatever `max_tokens` says (the default script is cut at
it), one token per frame; the last frame has no tokens and `finish_reason: "length"`, so a
reply that ends in EOS finishes as `stop` at the frontend (hidden EOS) and one that doesn't
as `length`. `generate` yields the reference mocker's frames, with `completion_usage` on the
first and last; `generate_batches` (what `shakedown serve` runs) the same frames as JSON
arrays of the outputs ready at once, with only the fields the frontend reads.
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


def _last_frame(
    prompt_tokens: int, completion_tokens: int, reason: str = "length"
) -> dict[str, Any]:
    last = _frame([], reason)
    last["completion_usage"] = _usage(prompt_tokens, completion_tokens)
    return last


# The serialized outputs `generate_batches` yields carry only what the frontend reads of a
# frame: the other fields of the reference's are null (or `output_type`, which it ignores).
_TOKEN_JSON = b'{"token_ids":[%d]}'
_FIRST_JSON = b'{"token_ids":[%d],"completion_usage":%s}'
_LAST_JSON = b'{"token_ids":[],"finish_reason":"%s","completion_usage":%s}'


def _last_json(prompt_tokens: int, completion_tokens: int, reason: bytes = b"length") -> bytes:
    return _LAST_JSON % (reason, orjson.dumps(_usage(prompt_tokens, completion_tokens)))


def _batches_json(ids: list[int], prompt_tokens: int, size: int) -> list[bytes]:
    """`ids` as JSON arrays of up to `size` outputs each; the last array carries the
    final frame (an array of its own when there are no ids)."""
    outputs = [_TOKEN_JSON % token for token in ids]
    if outputs:
        outputs[0] = _FIRST_JSON % (ids[0], orjson.dumps(_usage(prompt_tokens, 1)))
    last = _last_json(prompt_tokens, len(ids))
    batches = [outputs[start : start + size] for start in range(0, len(ids), size)] or [[]]
    batches[-1].append(last)
    return [b"[" + b",".join(batch) + b"]" for batch in batches]


CACHED_REPLIES = 256
"""Serialized replies kept per mocker (a scripted row at one prompt length each)."""


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
        # Serialized scripted replies by (the row's id, the reply's length, the prompt's):
        # each entry holds its row, so the id can't be reused while it is cached.
        self._cached: dict[tuple[int, int, int], tuple[list[int], list[bytes]]] = {}

    def choose(self, request: Mapping[str, Any]) -> list[int] | None:
        """The scripted ids for `request`, or None for random output (subclasses may
        answer otherwise: every reply goes through here)."""
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

    def _reply(self, request: Mapping[str, Any]) -> tuple[list[int], int, list[int] | None]:
        """The reply's ids, the prompt's length, and the scripted row they come from (None
        for random output, which is never the same twice)."""
        # Like the reference mocker, before any output and even for a replayed row.
        max_tokens = (request.get("stop_conditions") or {}).get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
            raise MockerRequestError(MAX_TOKENS_REQUIRED)
        prompt_tokens = len(request.get("token_ids") or ())
        row = self.choose(request)
        if row is None:
            return self._random_ids(max_tokens), prompt_tokens, None
        # A named replay row is emitted whole, as the reference mocker does; the default
        # script stands in for a model, so it honours `max_tokens`.
        scripted = row is self.default
        return (row[:max_tokens] if scripted else row), prompt_tokens, row

    async def generate(
        self, request: dict[str, Any], context: EngineContext
    ) -> AsyncIterator[dict[str, Any]]:
        """One output per item, as the reference mocker sends them (any engine consumer)."""
        ids, prompt_tokens, _ = self._reply(request)
        delay = self.token_delay
        for done, token in enumerate(ids):
            if context.is_stopped():
                yield _last_frame(prompt_tokens, done, "cancelled")
                return
            if delay:
                await asyncio.sleep(delay)
            frame = _frame([token])
            if done == 0:
                frame["completion_usage"] = _usage(prompt_tokens, 1)
            yield frame
        yield _last_frame(prompt_tokens, len(ids))

    async def generate_batches(
        self, request: dict[str, Any], context: EngineContext
    ) -> AsyncIterator[EngineItem]:
        """The same outputs serialized, those ready at once as one JSON array (shakedown's
        endpoint takes serialized batches): with no delay, up to `BATCH_OUTPUTS` an array,
        the last one carrying the final frame, and a scripted reply's arrays are made once;
        with a delay, one output an array. Outputs carry only the fields the frontend reads
        (the reference's others are null)."""
        if self.token_delay:
            async for frame in self.generate(request, context):
                read = {k: v for k, v in frame.items() if v is not None and k != "output_type"}
                yield b"[" + orjson.dumps(read) + b"]"
            return
        ids, prompt_tokens, row = self._reply(request)
        key = (id(row), len(ids), prompt_tokens)
        cached = None if row is None else self._cached.get(key)
        if cached is not None and cached[0] is row:
            batches = cached[1]
        else:
            batches = _batches_json(ids, prompt_tokens, BATCH_OUTPUTS)
            if row is not None:
                if len(self._cached) >= CACHED_REPLIES:
                    self._cached.clear()
                self._cached[key] = (row, batches)
        for done, batch in enumerate(batches):
            if context.is_stopped():
                yield b"[" + _last_json(prompt_tokens, done * BATCH_OUTPUTS, b"cancelled") + b"]"
                return
            yield batch

    __call__ = generate
