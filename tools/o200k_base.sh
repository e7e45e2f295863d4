#!/usr/bin/env bash
# Make the `o200k_base` BPE vocab (what openai-harmony's Harmony encoding is built on) available
# offline, and print the directory holding it: pass that directory as TIKTOKEN_ENCODINGS_BASE
# to a process that loads the Harmony encoding (Dynamo's frontend, vLLM's and SGLang's gpt-oss
# parsers); with it set, openai-harmony reads `<dir>/o200k_base.tiktoken` instead of
# downloading it at first use.
#
# The file comes from the crates.io crate `tiktoken-rs` (its assets/), fetched by cargo
# through a throwaway manifest; the sha256 checked is the one openai-harmony and tiktoken
# expect for o200k_base. A rerun with the file in place does nothing (~0.1 s).
#
# env: SHAKEDOWN_O200K_DIR  cache location (default ~/.cache/shakedown/o200k_base)
set -euo pipefail

CRATE=tiktoken-rs
VERSION=0.7.0
FILE=o200k_base.tiktoken
SHA256=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
DIR=${SHAKEDOWN_O200K_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shakedown/o200k_base}

verified() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9

if verified "$DIR/$FILE"; then
  echo "$DIR"
  exit 0
fi

command -v cargo >/dev/null || { echo "o200k_base: cargo is needed to fetch $CRATE" >&2; exit 1; }
FETCH=$DIR/fetch
mkdir -p "$FETCH/src"
cat > "$FETCH/Cargo.toml" <<TOML
[package]
name = "o200k-base-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$CRATE = "=$VERSION"
TOML
: > "$FETCH/src/lib.rs"
cargo fetch -q --manifest-path "$FETCH/Cargo.toml" >&2 \
  || { echo "o200k_base: cargo fetch of $CRATE $VERSION failed" >&2; exit 1; }
# Where cargo unpacked the crate: its manifest path, from cargo's own metadata.
SRC=$(cargo metadata -q --format-version 1 --offline --manifest-path "$FETCH/Cargo.toml" \
  | python3 -c 'import json, sys
meta = json.load(sys.stdin)
print(next(p["manifest_path"] for p in meta["packages"] if p["name"] == sys.argv[1]))' "$CRATE")
ASSET=$(dirname "$SRC")/assets/$FILE
verified "$ASSET" || { echo "o200k_base: $ASSET is missing or its sha256 is not $SHA256" >&2; exit 1; }
cp "$ASSET" "$DIR/$FILE.tmp"
mv "$DIR/$FILE.tmp" "$DIR/$FILE"
rm -rf "$FETCH"
echo "$DIR"
