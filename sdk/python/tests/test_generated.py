"""The stubs in tabos/_proto are what generate.sh makes from today's proto."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_the_stubs_match_the_proto(tmp_path: Path) -> None:
    subprocess.run(
        [str(HERE / "generate.sh"), str(tmp_path)],
        check=True,
        env=dict(os.environ, PYTHON=sys.executable),
    )
    for name in ("tabos_pb2.py", "tabos_pb2_grpc.py", "tabos_pb2.pyi"):
        fresh = (tmp_path / name).read_text()
        kept = (HERE / "tabos/_proto" / name).read_text()
        assert fresh == kept, f"{name} is stale: run sdk/python/generate.sh"
