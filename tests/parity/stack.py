"""The parity suite's processes: shakedown.parity.stack, plus what only a checkout has —
the Dynamo venv (tools/dynamo_venv.sh), the Harmony encoding's vocab (tools/o200k_base.sh)
and the default replay trace (build_trace.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shakedown.parity.stack import (
    ENDPOINT,
    LOOPBACK,
    MODEL_NAME,
    Proc,
    dynamo_env,
    free_port,
    same_python_version,
    serve_argv,
    site_packages,
    spawn,
    start_dynamo_frontend,
    start_dynamo_mocker,
    start_shakedown,
    wait_ready,
)

__all__ = [
    "ENDPOINT",
    "LOOPBACK",
    "MODEL_NAME",
    "Proc",
    "build_assets",
    "dynamo_env",
    "dynamo_python",
    "free_port",
    "harmony_vocab",
    "same_python_version",
    "serve_argv",
    "site_packages",
    "spawn",
    "start_dynamo_frontend",
    "start_dynamo_mocker",
    "start_shakedown",
    "wait_ready",
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV_SCRIPT = ROOT / "tools" / "dynamo_venv.sh"
VOCAB_SCRIPT = ROOT / "tools" / "o200k_base.sh"


def dynamo_python() -> Path:
    """The Dynamo venv's interpreter (built on first use, ~25 s; cached afterwards)."""
    env = dict(os.environ)
    # Same interpreter version as ours, so the adapter process can load both venvs' packages.
    env.setdefault("SHAKEDOWN_DYNAMO_PYTHON", getattr(sys, "_base_executable", sys.executable))
    out = subprocess.run(
        ["bash", str(VENV_SCRIPT)], env=env, check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def harmony_vocab() -> Path:
    """The directory holding `o200k_base.tiktoken` (fetched through cargo on first use)."""
    out = subprocess.run(["bash", str(VOCAB_SCRIPT)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def build_assets(dyn_python: Path, model_dir: Path, out_dir: Path) -> Path:
    """The replay trace for `model_dir`'s tokenizer; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = out_dir / "replay.jsonl"
    subprocess.run(
        [str(dyn_python), str(HERE / "build_trace.py"), str(model_dir), str(trace)], check=True
    )
    return trace
