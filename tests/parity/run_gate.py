"""An exec gate for test_run.py: records where it found the loopback, then does gate_check's
chat through it.

usage: run_gate.py RECORD [--go FILE] [--child] [--expect TEXT]

RECORD gets {"base_url", "api_key", "pid", "child"} as soon as the gate starts; with --go it
then waits (up to 120 s) for FILE to exist, so a test can look at the world while the worker
is held; --child leaves a sleeping child in the gate's process group first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_check import main as chat_check


def option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def main() -> int:
    record = Path(sys.argv[1])
    child = None
    if "--child" in sys.argv:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    data = {
        "base_url": os.environ["OPENAI_BASE_URL"],
        "api_key": os.environ["OPENAI_API_KEY"],
        "pid": os.getpid(),
        "child": None if child is None else child.pid,
    }
    record.with_suffix(".tmp").write_text(json.dumps(data))
    record.with_suffix(".tmp").rename(record)
    go = option("--go")
    if go is not None:
        deadline = time.monotonic() + 120
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                return 2
            time.sleep(0.05)
    return chat_check()


if __name__ == "__main__":
    sys.exit(main())
