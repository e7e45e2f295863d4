"""An exec gate: one chat through the loopback (OPENAI_BASE_URL, OPENAI_API_KEY,
DYN_VALIDATION_MODEL) must answer failing_engine's reply; `--expect TEXT` changes the
expected content (a wrong one makes the gate fail)."""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main() -> int:
    expect = sys.argv[sys.argv.index("--expect") + 1] if "--expect" in sys.argv else "First turn."
    body = json.dumps(
        {
            "model": os.environ["DYN_VALIDATION_MODEL"],
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 16,
        }
    ).encode()
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        body,
        {
            "content-type": "application/json",
            "authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        },
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        message = json.loads(resp.read())["choices"][0]["message"]
    print(json.dumps(message))
    return 0 if message["content"] == expect and message["reasoning_content"] == "a" else 1


if __name__ == "__main__":
    sys.exit(main())
