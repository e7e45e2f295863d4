#!/usr/bin/env bash
# Build (idempotently) a directory of the CPU-only packages that NVIDIA Dynamo 1.6.1's stock
# backend entry modules (dynamo.vllm, dynamo.sglang, dynamo.trtllm) import besides their GPU
# engines, so tests/parity/test_run.py can import those modules with only the engines
# (vllm, sglang, tensorrt_llm, torch, transformers) stubbed. Prints the directory.
# Kept apart from tools/dynamo_venv.sh so the frontend's venv stays as it is.
#
# env: SHAKEDOWN_DYNAMO_BACKEND_DEPS  location (default ~/.cache/shakedown/dynamo-1.6.1/backend-deps)
#      SHAKEDOWN_DYNAMO_PYTHON        interpreter whose pip installs them (default python3)
set -euo pipefail

DIR=${SHAKEDOWN_DYNAMO_BACKEND_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/shakedown/dynamo-1.6.1/backend-deps}
PYTHON=${SHAKEDOWN_DYNAMO_PYTHON:-python3}
MARK=$DIR/.shakedown-pins

DEPS=(
  prometheus-client==0.26.0 # dynamo.vllm.main, dynamo.trtllm
  numpy==2.4.6              # dynamo.vllm.handlers, dynamo.nixl_connect
  pillow==13.0.0            # dynamo.common multimodal utils
  aiohttp==3.14.5           # dynamo.common media fetching
  redis==8.1.0              # dynamo.vllm multimodal cache
  safetensors==0.8.0        # dynamo.vllm multimodal utils
  pyzmq==27.3.0             # dynamo.sglang request handlers
  blake3==1.0.11            # dynamo.vllm, dynamo.sglang
)
SPEC="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') | ${DEPS[*]}"

mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9

if [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$SPEC" ]; then
  echo "$DIR"
  exit 0
fi

rm -rf "$DIR"
mkdir -p "$DIR"
LOG=$DIR.install.log
"$PYTHON" -m pip --disable-pip-version-check -q install --target "$DIR" "${DEPS[@]}" >"$LOG" 2>&1 \
  || { tail -n 30 "$LOG" >&2; echo "dynamo_backend_deps: pip install failed (log: $LOG)" >&2; exit 1; }
printf '%s' "$SPEC" > "$MARK"
echo "$DIR"
