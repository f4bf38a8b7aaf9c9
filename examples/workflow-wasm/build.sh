#!/bin/sh
# Builds the workflows as one WASI module, workflow.wasm
# (needs the target once: rustup target add wasm32-wasip1).
# Usage: build.sh [OUT_DIR]   (default: this directory)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"
rustc --edition 2021 --target wasm32-wasip1 -C opt-level=2 -C strip=symbols \
    -o "$out/workflow.wasm" "$here/workflow.rs"
