#!/bin/sh
# Builds the word count's map, combine and reduce as WASI modules
# (needs the target once: rustup target add wasm32-wasip1).
# Usage: build.sh [OUT_DIR]   (default: this directory)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"
for p in map sum reduce; do
    rustc --edition 2021 --target wasm32-wasip1 -C opt-level=3 -C strip=symbols -o "$out/$p.wasm" "$here/$p.rs"
done
