"""Write the replay trace both mockers play: one JSONL row per scripted reply.

Row: {"session_id": S, "output_length": N, "output_token_ids": [...]}; a request picks row K
of session S with nvext.annotations ["output_replay_id:S:K"]. The texts are the ones the
Dynamo 1.6.1 reference captures used (`captures.REPLAY_SCRIPT`); a trailing <EOS> appends the
EOS id (1), without it the reply ends on `length`.

usage: python build_trace.py MODEL_DIR OUT.jsonl   (needs `tokenizers`; the Dynamo venv has it)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: stdlib-only helpers

from captures import EOS_ID, EOS_MARK, REPLAY_SCRIPT


def main(model_dir: str, out: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        for session, turns in REPLAY_SCRIPT.items():
            for text in turns:
                eos = text.endswith(EOS_MARK)
                body = text[: -len(EOS_MARK)] if eos else text
                ids = tok.encode(body, add_special_tokens=False).ids + ([EOS_ID] if eos else [])
                row = {"session_id": session, "output_length": len(ids), "output_token_ids": ids}
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
