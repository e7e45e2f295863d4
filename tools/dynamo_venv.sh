#!/usr/bin/env bash
# Build (idempotently) a venv holding the real NVIDIA Dynamo 1.6.1 frontend + mocker, for the
# parity suite (tests/parity/) and benches/bench_vs_dynamo.py. Prints the venv's python path.
#
# ai-dynamo 1.6.1 declares `aisimulate`, whose index is unreachable; nothing the frontend or
# the mocker runs imports it, so both Dynamo wheels go in with --no-deps and then only the
# packages those entry points import (each found by an ImportError at start-up).
# A rerun with the same pins does nothing (~0.2 s).
#
# env: SHAKEDOWN_DYNAMO_VENV  venv location (default ~/.cache/shakedown/dynamo-1.6.1/venv)
#      SHAKEDOWN_DYNAMO_PYTHON interpreter for a new venv (default python3, >= 3.10)
set -euo pipefail

VENV=${SHAKEDOWN_DYNAMO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shakedown/dynamo-1.6.1/venv}
PYTHON=${SHAKEDOWN_DYNAMO_PYTHON:-python3}
PY=$VENV/bin/python
MARK=$VENV/.shakedown-pins

DYNAMO_PKGS=(ai-dynamo-runtime==1.6.1 ai-dynamo==1.6.1)
DEPS=(
  pydantic==2.13.5          # dynamo.runtime; ai-dynamo-runtime pins >=2.10.6,<=2.13.5
  uvloop==0.23.0            # dynamo.frontend.main, dynamo.mocker.main
  msgspec==0.23.0           # dynamo.common.configuration.groups.kv_router_args
  PyYAML==6.0.4             # dynamo.common.configuration.groups.kv_router_args
  packaging==26.4           # dynamo.frontend.main (not declared by ai-dynamo)
  typing-extensions==4.16.0 # dynamo.replay.api, imported by the mocker
  tokenizers==0.23.3        # tests/parity/build_trace.py (Dynamo itself tokenizes in Rust)
)
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || { echo "dynamo_venv: $PYTHON is missing or older than 3.10" >&2; exit 1; }
# The interpreter is part of the spec: a venv from another Python is rebuilt.
SPEC="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') | ${DYNAMO_PKGS[*]} | ${DEPS[*]}"

# One builder at a time; others wait, then find the venv ready.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

imports_ok() {
  "$PY" -c 'import dynamo.frontend.main, dynamo.mocker.main, dynamo.llm, dynamo.runtime, tokenizers' 2>/dev/null
}

if [ -x "$PY" ] && [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$SPEC" ] && imports_ok; then
  echo "$PY"
  exit 0
fi

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
LOG=$VENV/install.log
pip_q() {
  "$PY" -m pip --disable-pip-version-check -q "$@" >>"$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "dynamo_venv: pip $1 failed (log: $LOG)" >&2; exit 1; }
}
pip_q install --no-deps "${DYNAMO_PKGS[@]}"
pip_q install "${DEPS[@]}"
imports_ok || { echo "dynamo_venv: import check failed in $VENV" >&2; exit 1; }
printf '%s' "$SPEC" > "$MARK"
echo "$PY"
