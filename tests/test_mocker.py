"""The scripted mocker: replay traces, scripts, random output, frames like the reference's."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from captures import CAPTURES
from shakedown._core import Pipeline
from shakedown.endpoint import EngineContext, RequestContext
from shakedown.engines.mocker import (
    BATCH_OUTPUTS,
    MAX_TOKENS_REQUIRED,
    Mocker,
    MockerError,
    MockerRequestError,
    load_replay_trace,
    random_id_range,
    script_ids,
    script_table,
)

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "python" / "shakedown" / "models" / "tiny"


def run(
    mocker: Mocker, request: dict[str, Any], context: RequestContext | None = None
) -> list[dict[str, Any]]:
    """The frames, batches (lists) flattened."""

    async def collect() -> list[dict[str, Any]]:
        frames: list[dict[str, Any]] = []
        async for item in mocker.generate(request, context or RequestContext("r")):
            frames.extend(item if isinstance(item, list) else [item])
        return frames

    return asyncio.run(collect())


def emitted(frames: list[dict[str, Any]]) -> list[int]:
    return [t for f in frames for t in f["token_ids"]]


def write_trace(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_frames_match_the_reference_mocker() -> None:
    # The 1.6.1 mocker's frames for replay row tool:0, read through Dynamo's own client.
    lines = (CAPTURES / "direct-client-mocker-tool0.txt").read_text().splitlines()
    request = json.loads(lines[0].removeprefix("REQUEST "))
    reference = [json.loads(line.removeprefix("OUTPUT ")) for line in lines[1:]]
    replay = {"tool": [emitted(reference)]}
    frames = run(Mocker(replay=replay), request)
    assert frames == reference
    assert [list(f) for f in frames] == [list(f) for f in reference]  # key order too


def test_replay_trace_rows_by_session_and_turn(tmp_path: Path) -> None:
    trace = write_trace(
        tmp_path / "t.jsonl",
        [
            {"session_id": "conv", "output_length": 2, "output_token_ids": [5, 1]},
            {"session_id": "tool", "output_length": 3, "output_token_ids": [7, 8, 1]},
            {"session_id": "conv", "output_length": 1, "output_token_ids": [6]},
        ],
    )
    table = load_replay_trace(trace)
    assert table == {"conv": [[5, 1], [6]], "tool": [[7, 8, 1]]}
    mocker = Mocker(replay=table)
    for key, ids in [("conv:0", [5, 1]), ("conv:1", [6]), ("tool:0", [7, 8, 1])]:
        # Replays ignore max_tokens, like the reference.
        request = {
            "token_ids": [1, 2],
            "stop_conditions": {"max_tokens": 1},
            "annotations": ["x", f"output_replay_id:{key}"],
        }
        frames = run(mocker, request)
        assert emitted(frames) == ids
        assert frames[-1]["finish_reason"] == "length"
        assert frames[-1]["completion_usage"]["completion_tokens"] == len(ids)
        assert frames[0]["completion_usage"]["prompt_tokens"] == 2


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"session_id": "a", "output_length": 3, "output_token_ids": [1, 2]},
            "output_length is 3 but there are 2",
        ),
        ({"session_id": "a", "output_token_ids": [1]}, "not a replay row"),
        ({"session_id": "a", "output_length": 1, "output_token_ids": ["x"]}, "list of ids"),
        ("not json", "not a replay row"),
    ],
)
def test_bad_trace_rows_are_reported_with_their_line(
    tmp_path: Path, row: Any, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"session_id": "ok", "output_length": 1, "output_token_ids": [1]})
    bad = row if isinstance(row, str) else json.dumps(row)
    path.write_text(f"{good}\n\n{bad}\n")
    with pytest.raises(MockerError, match=f"bad.jsonl:3: .*{message}"):
        load_replay_trace(path)


def test_unknown_replay_key_falls_back_to_random(caplog: pytest.LogCaptureFixture) -> None:
    mocker = Mocker(replay={"tool": [[7, 1]]}, default=[9, 1], seed=3)
    for key in ("tool:7", "nosuch:0", "tool:x"):
        frames = run(
            mocker,
            {"stop_conditions": {"max_tokens": 4}, "annotations": [f"output_replay_id:{key}"]},
        )
        ids = emitted(frames)
        assert len(ids) == 4 and all(1000 <= t < 2000 for t in ids)
        assert f"replay_key={key!r}" in caplog.text


def test_default_reply_when_no_row_is_named() -> None:
    request = {"stop_conditions": {"max_tokens": 64}}
    assert emitted(run(Mocker(default=[9, 10, 1]), request)) == [9, 10, 1]


def test_random_output_is_exactly_max_tokens_in_the_reference_range() -> None:
    frames = run(Mocker(seed=1), {"token_ids": [1, 2, 3], "stop_conditions": {"max_tokens": 50}})
    ids = emitted(frames)
    assert len(ids) == 50 and len(frames) == 51
    assert all(1000 <= t < 2000 for t in ids)
    assert len(set(ids)) > 10
    assert frames[-1]["token_ids"] == [] and frames[-1]["finish_reason"] == "length"
    assert frames[-1]["completion_usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 50,
        "total_tokens": 53,
        "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0},
    }
    assert all("completion_usage" not in f for f in frames[1:-1])


def test_random_ids_stay_inside_a_small_vocabulary() -> None:
    assert random_id_range(None) == (1000, 2000)
    assert random_id_range(129280) == (1000, 2000)
    assert random_id_range(500) == (250, 500)
    ids = emitted(
        run(
            Mocker(vocab_size=20, avoid_ids={10, 11, 12}, seed=2),
            {"stop_conditions": {"max_tokens": 200}},
        )
    )
    assert set(ids) <= set(range(13, 20))


@pytest.mark.parametrize("stop_conditions", [{}, {"max_tokens": None}, {"max_tokens": 0}])
@pytest.mark.parametrize("annotations", [[], ["output_replay_id:s:0"]])
@pytest.mark.parametrize("default", [None, [9, 10, 1]])
def test_every_reply_needs_max_tokens(
    stop_conditions: dict[str, Any], annotations: list[str], default: list[int] | None
) -> None:
    # Like the reference mocker: random, default and replayed replies alike (a 400).
    mocker = Mocker(replay={"s": [[5, 6]]}, default=default)
    request = {"stop_conditions": stop_conditions, "annotations": annotations}
    with pytest.raises(MockerRequestError, match=r"`max_tokens`\) is required") as raised:
        run(mocker, request)
    assert raised.value.status == 400
    assert "mocker worker" in MAX_TOKENS_REQUIRED


def test_token_delay_paces_output() -> None:
    start = time.perf_counter()
    run(Mocker(default=list(range(10)), token_delay=0.01), {"stop_conditions": {"max_tokens": 64}})
    assert time.perf_counter() - start >= 0.1


def test_a_stopped_context_ends_with_cancelled() -> None:
    context = RequestContext("r")

    async def collect() -> list[dict[str, Any]]:
        frames = []
        request = {"stop_conditions": {"max_tokens": 64}}
        async for frame in Mocker(default=list(range(100, 120))).generate(request, context):
            frames.append(frame)
            if len(frames) == 3:
                context.stop_generating()
        return frames

    frames = asyncio.run(collect())
    assert emitted(frames) == [100, 101, 102]
    assert frames[-1]["finish_reason"] == "cancelled"
    assert frames[-1]["completion_usage"]["completion_tokens"] == 3


def read_fields(frame: dict[str, Any]) -> dict[str, Any]:
    """A reference frame as the frontend reads it: null fields are absent, `output_type`
    is ignored."""
    return {k: v for k, v in frame.items() if v is not None and k != "output_type"}


def test_without_delay_outputs_come_in_batches_of_the_same_frames() -> None:
    ids = list(range(100, 100 + BATCH_OUTPUTS + 5))
    request = {"token_ids": [1, 2], "stop_conditions": {"max_tokens": 200}}

    async def items(mocker: Mocker, batches: bool) -> list[Any]:
        generate = mocker.generate_batches if batches else mocker.generate
        return [item async for item in generate(request, RequestContext("r"))]

    mocker = Mocker(default=ids)
    batches = asyncio.run(items(mocker, True))
    assert all(isinstance(batch, bytes) for batch in batches)
    decoded = [json.loads(batch) for batch in batches]
    assert [len(b) for b in decoded] == [BATCH_OUTPUTS, 5 + 1]  # the last carries the end
    one_by_one = asyncio.run(items(Mocker(default=ids), False))
    assert all(isinstance(frame, dict) for frame in one_by_one)
    assert [frame for batch in decoded for frame in batch] == list(map(read_fields, one_by_one))
    assert asyncio.run(items(mocker, True)) == batches  # made once, served again
    paced = asyncio.run(items(Mocker(default=ids, token_delay=0.0001), True))
    assert [json.loads(item) for item in paced] == [[read_fields(f)] for f in one_by_one]


def test_serialized_replies_follow_the_rows_they_come_from() -> None:
    mocker = Mocker(replay={"s": [[5, 6, 1]]}, default=[9, 10, 11, 1])

    def served(annotations: list[str], max_tokens: int = 64, prompt: int = 2) -> list[Any]:
        request = {
            "token_ids": list(range(prompt)),
            "stop_conditions": {"max_tokens": max_tokens},
            "annotations": annotations,
        }

        async def collect() -> list[Any]:
            return [
                frame
                async for item in mocker.generate_batches(request, RequestContext("r"))
                for frame in json.loads(item)
            ]

        return asyncio.run(collect())

    row = ["output_replay_id:s:0"]
    assert emitted(served(row)) == [5, 6, 1]
    mocker.replay["s"] = [[7, 8, 1]]  # a new row under the same key, of the same length
    assert emitted(served(row)) == [7, 8, 1]
    assert emitted(served([])) == [9, 10, 11, 1]
    assert emitted(served([], max_tokens=2)) == [9, 10]  # the default script is cut
    mocker.default = [8, 7, 6, 1]
    assert emitted(served([])) == [8, 7, 6, 1]
    # The usage follows the prompt's length.
    assert served([], prompt=5)[-1]["completion_usage"]["prompt_tokens"] == 5
    assert served([], prompt=3)[-1]["completion_usage"]["prompt_tokens"] == 3


def test_a_subclass_choosing_the_reply_is_served_by_both_generators() -> None:
    class Echo(Mocker):
        """Answers with the prompt's own ids (whole: no default script to cut)."""

        def choose(self, request: Any) -> list[int] | None:
            return [*request["token_ids"], 1]

    request = {"token_ids": [40, 41, 42], "stop_conditions": {"max_tokens": 2}}

    async def batched() -> list[dict[str, Any]]:
        return [
            frame
            async for item in Echo().generate_batches(request, RequestContext("r"))
            for frame in json.loads(item)
        ]

    assert emitted(run(Echo(), request)) == [40, 41, 42, 1]
    assert emitted(asyncio.run(batched())) == [40, 41, 42, 1]


def test_a_context_stopped_between_batches_ends_with_cancelled() -> None:
    context = RequestContext("r")
    ids = list(range(100, 100 + 2 * BATCH_OUTPUTS))

    async def collect() -> list[Any]:
        items = []
        request = {"stop_conditions": {"max_tokens": 500}}
        async for item in Mocker(default=ids).generate_batches(request, context):
            items.append(json.loads(item))
            context.stop_generating()
        return items

    first, [last] = asyncio.run(collect())
    assert emitted(first) == ids[:BATCH_OUTPUTS]
    assert last["finish_reason"] == "cancelled"
    assert last["completion_usage"]["completion_tokens"] == BATCH_OUTPUTS


def test_scripted_texts_use_the_models_tokenizer() -> None:
    pipeline = Pipeline(str(TINY))
    eos = json.loads((TINY / "generation_config.json").read_text())["eos_token_id"]
    text = "<think>plan</think>Sure."
    ids = pipeline.tokenize(text)
    assert ids and eos not in ids
    assert script_ids(text + "<EOS>", pipeline.tokenize, eos) == [*ids, eos]
    assert script_ids(text, pipeline.tokenize, eos) == ids
    table = script_table({"s": [text, text + "<EOS>"]}, pipeline.tokenize, eos)
    assert table == {"s": [ids, [*ids, eos]]}
    with pytest.raises(MockerError, match="no EOS id"):
        script_ids("x<EOS>", pipeline.tokenize, None)


def test_negative_delay_is_refused() -> None:
    with pytest.raises(MockerError):
        Mocker(token_delay=-1)


def test_default_script_honours_max_tokens_but_named_rows_do_not() -> None:
    mocker = Mocker(replay={"row": [[5, 6, 7, 1]]}, default=[9, 10, 11, 1])
    short = {"stop_conditions": {"max_tokens": 2}}
    assert emitted(run(mocker, short)) == [9, 10]
    named = {**short, "annotations": ["output_replay_id:row:0"]}
    assert emitted(run(mocker, named)) == [5, 6, 7, 1]


def test_engines_take_the_one_engine_context() -> None:
    from shakedown.integrations.dynamo import DynamoEngine

    assert get_type_hints(Mocker.generate)["context"] is EngineContext
    assert get_type_hints(DynamoEngine.generate)["context"] == EngineContext | None
    context: EngineContext = RequestContext("r")  # what the endpoint passes satisfies it
    assert (context.id, context.is_stopped()) == ("r", False)
