"""The `shakedown` command line. Each subcommand adds itself with an `add_*` function."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shakedown._core import Pipeline
from shakedown.checks import add_check_subcommand
from shakedown.doctor import add_doctor_subcommand
from shakedown.engines.mocker import Mocker, load_replay_trace, script_table
from shakedown.integrations.dynamo_run import add_run_subcommand
from shakedown.parity import add_parity_subcommand
from shakedown.validation.serve import add_gate_arguments, run_validated, validation_from_args

TINY_MODEL = Path(__file__).resolve().parent / "models" / "tiny"
TINY_NAME = "tiny"
TINY_PARSERS = ("deepseek_r1", "hermes")

# What the mocker says unless a request picks a row with `output_replay_id:SESSION:K`.
DEFAULT_SESSION = "tool"
DEFAULT_SCRIPT: dict[str, list[str]] = {
    "tool": [
        "<think>The user wants the weather in Paris, so I will call the get_weather tool."
        "</think>Let me check that for you."
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><EOS>'
    ],
    "text": ["<think>The user greets me.</think>Hello there! How can I help you today?<EOS>"],
    "noeos": ["<think>short</think>No EOS at the end."],
}

log = logging.getLogger("shakedown")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shakedown",
        description="Hold an LLM worker until it proves itself.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve(commands)
    add_run_subcommand(commands)
    add_check_subcommand(commands)
    add_doctor_subcommand(commands)
    add_parity_subcommand(commands)
    return parser


def add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a model's OpenAI endpoint on 127.0.0.1 through an engine",
        description=(
            "Serve the OpenAI endpoint on 127.0.0.1. With no options: the tiny model shipped "
            "in the package, through the mocker scripted to reason and call a tool. Prints "
            "OPENAI_BASE_URL=... as its first line when ready; stops on SIGINT or SIGTERM."
        ),
    )
    serve.add_argument("--model-dir", help="model directory (default: the packaged tiny model)")
    serve.add_argument("--model-name", help="served model name (default: the directory's name)")
    serve.add_argument("--reasoning-parser", help="reasoning parser (tiny model: deepseek_r1)")
    serve.add_argument("--tool-call-parser", help="tool-call parser (tiny model: hermes)")
    serve.add_argument(
        "--parser-dialect",
        choices=("dynamo", "vllm", "sglang"),
        default="dynamo",
        help="read replies as this server's parsers do where they differ (default: dynamo; "
        "docs/parsers.md, Dialects)",
    )
    serve.add_argument(
        "--engine",
        default="mocker",
        help="`mocker` or MODULE:ATTR naming a generate(request, context) function or an "
        "object with one (default: mocker)",
    )
    serve.add_argument("--replay-trace", help="mocker replay-trace JSONL file")
    serve.add_argument(
        "--script",
        help='mocker script, JSON {"session": ["text", ...]}; a trailing <EOS> appends EOS',
    )
    serve.add_argument(
        "--token-delay", type=float, default=0.0, help="mocker delay per token, in seconds"
    )
    serve.add_argument(
        "--port",
        type=int,
        help="port on 127.0.0.1 (default: $DYN_WORKER_VALIDATION_LOCAL_PORT, else ephemeral)",
    )
    add_gate_arguments(serve)
    serve.set_defaults(func=run_serve)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_vocab(model_dir: Path) -> tuple[int | None, set[int]]:
    """Vocabulary size and the special token ids, from tokenizer.json when it is there."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None, set()
    tokenizer = _read_json(path)
    vocab = tokenizer.get("model", {}).get("vocab") or {}
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    added = tokenizer.get("added_tokens") or []
    ids.extend(token["id"] for token in added)
    special = {token["id"] for token in added if token.get("special")}
    return (max(ids) + 1 if ids else None), special


def load_engine(spec: str) -> Any:
    """`MODULE:ATTR` to an engine: a generate function, or an object with `.generate`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--engine must be `mocker` or MODULE:ATTR, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    generate = getattr(target, "generate", None)
    if callable(generate):
        return generate
    if callable(target):
        return target
    raise ValueError(f"{spec} is neither callable nor has a generate method")


def make_mocker(
    pipeline: Pipeline,
    model_dir: Path,
    *,
    script: dict[str, list[str]] | None = None,
    replay_trace: str | None = None,
    token_delay: float = 0.0,
) -> Mocker:
    """The mocker for `model_dir`: the script's rows (default: reasoning and a tool call)
    plus any replay trace, with random ids kept inside the model's vocabulary."""
    eos = pipeline.eos_token_ids[0] if pipeline.eos_token_ids else None
    replay = script_table(script or DEFAULT_SCRIPT, pipeline.tokenize, eos)
    if replay_trace:
        replay.update(load_replay_trace(replay_trace))
    default = replay[DEFAULT_SESSION][0] if DEFAULT_SESSION in replay else None
    vocab_size, special = model_vocab(model_dir)
    return Mocker(
        replay=replay,
        default=default,
        vocab_size=vocab_size,
        avoid_ids=special,
        token_delay=token_delay,
    )


def run_serve(args: argparse.Namespace) -> int:
    from shakedown.endpoint import EngineRegistry, LocalEndpoint, ModelCard, build_pipeline

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    tiny = args.model_dir is None
    model_dir = TINY_MODEL if tiny else Path(args.model_dir)
    reasoning, tools = TINY_PARSERS if tiny else (None, None)
    card = ModelCard(
        model_dir=str(model_dir),
        served_name=args.model_name or (TINY_NAME if tiny else model_dir.resolve().name),
        reasoning_parser=args.reasoning_parser or reasoning,
        tool_call_parser=args.tool_call_parser or tools,
        parser_dialect=args.parser_dialect,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        validation = validation_from_args(args)
        if args.port is not None and validation.enabled:
            validation.config = dataclasses.replace(validation.config, local_port=args.port)
        pipeline = build_pipeline(card)
        if args.engine == "mocker":
            script = None if args.script is None else _read_json(Path(args.script))
            engine = make_mocker(
                pipeline,
                model_dir,
                script=script,
                replay_trace=args.replay_trace,
                token_delay=args.token_delay,
            ).generate_batches
        else:
            engine = load_engine(args.engine)
        if validation.enabled:
            # The gated flow builds its own endpoint (bearer token, one per process).
            return run_validated(
                validation,
                card,
                engine,
                stop=stop,
                pipeline=pipeline,
                health_port=args.health_port,
                health_host=args.health_host,
            )
        registry = EngineRegistry()
        registry.register(card.endpoint, engine)
        endpoint = LocalEndpoint(card, pipeline, registry, port=args.port).start()
    except (OSError, ValueError, ImportError, AttributeError, RuntimeError) as err:
        print(f"shakedown serve: {err}", file=sys.stderr)
        return 1
    print(f"OPENAI_BASE_URL={endpoint.base_url}", flush=True)
    print(f"DYN_VALIDATION_MODEL={endpoint.model}", flush=True)
    stop.wait()
    stopped = endpoint.stop()
    log.info("stopped")
    return 0 if stopped else 1
