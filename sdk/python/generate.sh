#!/usr/bin/env bash
# Regenerates tabos/_proto from crates/client/proto/tabos.proto with
# grpcio-tools (pip install grpcio-tools). The generated files are kept in
# the repository so that `pip install ./sdk/python` needs no compiler;
# tests/test_generated.py checks they match the proto.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/tabos/_proto}"
python="${PYTHON:-python3}"
mkdir -p "$out"
"$python" -m grpc_tools.protoc -I "$here/../../crates/client/proto" \
    --python_out="$out" --grpc_python_out="$out" --pyi_out="$out" tabos.proto
# The generated service module imports its messages as a top-level module;
# inside the package it must import them relatively.
sed -i 's/^import tabos_pb2 as tabos__pb2$/from . import tabos_pb2 as tabos__pb2/' "$out/tabos_pb2_grpc.py"
