#!/usr/bin/env bash
# Build (idempotently) what the conformance stage (tests/conformance/) needs to run vLLM's and
# SGLang's own tool-call and reasoning parsers on this GPU-less machine. Prints the venv's python.
#
# - Their wheels come in with `pip download --no-deps` and only their Python files are unpacked
#   (under $ROOT/src, put on the venv's path by a .pth file): no engine, no CUDA kernels.
# - The venv holds the light packages the parsers' import path needs (each found by an
#   ImportError while importing every registered parser); GPU and engine packages it imports at
#   module level but never calls while parsing (torch, triton, ...) are shimmed at run time by
#   tests/conformance/peer_imports.py, not installed.
# - shakedown itself is not installed here (only its runtime dependencies): the driver puts the
#   caller's `shakedown` package on the path (tests/conformance/peer_driver.py --plugin).
# A rerun with the same pins does nothing (~0.2 s). Downloads: ~280 MB of wheels, once.
#
# env: SHAKEDOWN_PEERS_ROOT   cache location (default ~/.cache/shakedown/peers-vllm0.34.0-sglang0.5.23)
#      SHAKEDOWN_PEERS_PYTHON interpreter for a new venv (default python3, >= 3.10)
set -euo pipefail

VLLM=vllm==0.34.0
SGLANG=sglang==0.5.23
ROOT=${SHAKEDOWN_PEERS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/shakedown/peers-vllm0.34.0-sglang0.5.23}
PYTHON=${SHAKEDOWN_PEERS_PYTHON:-python3}
VENV=$ROOT/venv
PY=$VENV/bin/python
MARK=$ROOT/.shakedown-pins

# What the parsers' import path needs, pinned (vLLM's own bounds where it sets them).
DEPS=(
  pydantic==2.14.4 openai==3.57.0 regex==2026.11.19 partial-json-parser==0.2.1.1.post7
  tokenizers==0.23.3 "transformers==5.22.0" numpy==2.3.5 msgspec==0.23.0 orjson==3.13.0
  fastapi==0.136.1 pillow==13.0.0 pybase64==1.5.1 aiohttp==3.14.5 requests==2.34.2
  cachetools==8.0.2 prometheus_client==0.26.0 openai-harmony==0.0.8 cbor2==6.3.0
  cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0 psutil==7.2.2 pyzmq==27.3.0
  ipython==9.18.1 jsonschema==4.26.0 PyYAML==6.0.4 ijson==3.6.0 mistral_common==1.13.1
  granian==2.8.9  # shakedown's own runtime dependency (orjson, uvloop above), for the plugin
)
# Real packages whose declared dependencies are the GPU stack (torch, triton): installed without
# them; their own import of torch meets the shim.
NO_DEPS=(xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2)

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || { echo "peers_venv: $PYTHON is missing or older than 3.10" >&2; exit 1; }
SPEC="$("$PYTHON" -c 'import sys; print(sys.version.split()[0])') | $VLLM $SGLANG | ${DEPS[*]} | ${NO_DEPS[*]}"

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9

if [ -x "$PY" ] && [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$SPEC" ]; then
  echo "$PY"
  exit 0
fi

rm -rf "$VENV" "$ROOT/src" "$MARK"
"$PYTHON" -m venv "$VENV"
LOG=$ROOT/install.log
: >"$LOG"
pip_q() {
  "$PY" -m pip --disable-pip-version-check -q "$@" >>"$LOG" 2>&1 \
    || { tail -n 30 "$LOG" >&2; echo "peers_venv: pip $1 failed (log: $LOG)" >&2; exit 1; }
}
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
pip_q download --no-deps -d "$WHEELS" "$VLLM" "$SGLANG"
for pkg in vllm sglang; do
  whl=$(ls "$WHEELS"/"$pkg"-*.whl)
  dest=$ROOT/src/$pkg
  mkdir -p "$dest"
  # Python sources and the data files next to them (JSON, Jinja); no compiled kernels.
  "$PY" - "$whl" "$dest" "$pkg" <<'EOF'
import sys, zipfile
whl, dest, pkg = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(pkg + "/") and n.endswith((".py", ".json", ".jinja"))]
    names += [n for n in z.namelist() if n.split("/")[0].endswith(".dist-info")]
    z.extractall(dest, names)
EOF
done
pip_q install "${DEPS[@]}"
pip_q install --no-deps "${NO_DEPS[@]}"
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$ROOT/src/vllm" "$ROOT/src/sglang" >"$site/shakedown-peers.pth"
printf '%s' "$SPEC" >"$MARK"
echo "$PY"
