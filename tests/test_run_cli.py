"""`shakedown run` without Dynamo in the way: the command line, and gates unset meaning the
worker command is exec'd untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shakedown.integrations.dynamo_run import EXIT_USAGE, WorkerCommand

WORKER = """
import json, os, sys
print(json.dumps({"pid": os.getpid(), "argv": sys.argv,
                  "shakedown": sorted(m for m in sys.modules if m.startswith("shakedown"))}))
sys.exit(7)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYN_WORKER_VALIDATION")}
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shakedown", "run", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_gates_unset_execs_the_command_untouched(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = _run(["--", "python", str(script), "a", "--b"], _env())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    seen = json.loads(out)
    # Same process (exec), nothing of shakedown loaded, the worker's own argv.
    assert seen == {"pid": proc.pid, "argv": [str(script), "a", "--b"], "shakedown": []}


def test_gates_unset_runs_a_module(tmp_path: Path) -> None:
    (tmp_path / "workermod.py").write_text(WORKER)
    proc = _run(["--", "python3", "-m", "workermod", "x"], _env(PYTHONPATH=str(tmp_path)))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    assert json.loads(out)["argv"] == [str(tmp_path / "workermod.py"), "x"]


@pytest.mark.parametrize(
    "args",
    [[], ["--"], ["--", "node", "w.js"], ["--", "python", "-u", "w.py"], ["--", "python", "-m"]],
)
def test_other_commands_are_refused(args: list[str]) -> None:
    proc = _run(args, _env())
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_USAGE
    assert "shakedown run: expected `-- python -m MODULE ARGS`" in err


def test_gates_without_dynamo_fail_closed(tmp_path: Path) -> None:
    """Gates set but no Dynamo runtime to hold: the worker is not started at all."""
    marker = tmp_path / "started"
    script = tmp_path / "worker.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = _env(DYN_WORKER_VALIDATION_GATES="exec:true", PYTHONPATH=str(tmp_path))
    proc = _run(["--", "python", str(script)], env)
    _, err = proc.communicate(timeout=60)
    if "ai-dynamo-runtime" not in err:
        pytest.skip("Dynamo's runtime is importable here; the parity suite covers that case")
    assert proc.returncode == EXIT_USAGE and not marker.exists()


def test_bad_gate_setting_fails_closed(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    script = tmp_path / "worker.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = _env(DYN_WORKER_VALIDATION_GATES="[not json")
    proc = _run(["--", "python", str(script)], env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_USAGE and not marker.exists(), err


def test_command_forms() -> None:
    assert WorkerCommand.parse(["--", "python", "-m", "dynamo.vllm", "--model", "m"]) == (
        WorkerCommand(module="dynamo.vllm", script=None, args=("--model", "m"))
    )
    assert WorkerCommand.parse(["/usr/bin/python3.11", "w.py", "-m"]) == (
        WorkerCommand(module=None, script="w.py", args=("-m",))
    )


@pytest.mark.parametrize("suffix", [".jinja", ".json"])
def test_custom_chat_template_replaces_the_model_dirs(tmp_path: Path, suffix: str) -> None:
    """`register_model(..., custom_template_path=...)`: the loopback renders with it."""
    from shakedown._core import Pipeline
    from shakedown.cli import TINY_MODEL
    from shakedown.integrations.dynamo_run import card_model_dir

    text = "<<{% for m in messages %}{{ m['content'] }}{% endfor %}>>"
    template = tmp_path / f"custom{suffix}"
    template.write_text(json.dumps({"chat_template": text}) if suffix == ".json" else text)
    body = json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    ).encode()

    def prompt_ids(model_dir: str) -> list[int]:
        exchange = Pipeline(model_dir, served_name="tiny").chat(body, "r")
        ids: list[int] = json.loads(exchange.engine_request)["token_ids"]
        return ids

    with card_model_dir(str(TINY_MODEL), str(template)) as view:
        assert prompt_ids(view) == Pipeline(TINY_MODEL).tokenize("<<Hi>>")
    assert not Path(view).exists()
    assert prompt_ids(str(TINY_MODEL)) != Pipeline(TINY_MODEL).tokenize("<<Hi>>")
