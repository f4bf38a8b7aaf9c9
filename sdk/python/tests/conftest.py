"""A real tabos node for the tests: `tabos up` on a free loopback port in a
temporary directory (its binary from $TABOS_BIN, else target/debug/tabos)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk/python"))

import tabos  # noqa: E402


def tabos_bin() -> str:
    path = os.environ.get("TABOS_BIN") or str(ROOT / "target/debug/tabos")
    if not Path(path).exists():
        pytest.fail(f"{path} is missing: cargo build -p tabos-cli, or set TABOS_BIN")
    return path


class Node:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [tabos_bin(), "up", "--data", str(tmp / "data"), "--listen", "127.0.0.1:0",
             "--pg-listen", "none", "--no-context"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        lines = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            lines.append(line.strip())
            if line.startswith("try:"):
                break
        else:
            raise RuntimeError(f"tabos up ended early: {lines}")
        # "tabos node on 127.0.0.1:PORT: ..."
        self.addr = ":".join(lines[0].removeprefix("tabos node on ").split(":")[:2])
        token_path = lines[1].removeprefix("operator credential: ").split(" (")[0]
        self.token = Path(token_path).read_text().strip()

        # The node's local socket (a unix: address speaks its local
        # transport).
        self.socket = f"unix:{tmp / 'data' / 'tabos.sock'}"

        self.way = "tcp"

    def client(self, token: str | None = None) -> tabos.Client:
        """A client of this node, the way the test session reaches it."""
        return tabos.Client(self.socket if self.way == "local" else self.addr, token or self.token)

    def cli(self, *args: str) -> str:
        env = dict(os.environ, TABOS_ADDR=self.addr, TABOS_TOKEN=self.token)
        return subprocess.run([tabos_bin(), *args], env=env, check=True,
                              capture_output=True, text=True).stdout

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session", params=["tcp", "local"])
def node(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """A node per way of reaching it: the tests' ``client`` speaks gRPC on
    TCP to one and the local transport on its socket to the other, so
    every test runs over both, each on a node of its own."""
    n = Node(tmp_path_factory.mktemp(f"node-{request.param}"))
    n.way = request.param
    yield n
    n.stop()


@pytest.fixture
def client(node: Node):
    with node.client() as c:
        yield c
