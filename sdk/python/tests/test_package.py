"""The package as users get it: type-checked by mypy, built as a wheel by
pip, versioned as the project is."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tabos

SDK = Path(__file__).resolve().parents[1]
ROOT = SDK.parents[1]


def project_version() -> str:
    """The workspace's version ([workspace.package] of Cargo.toml)."""
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    m = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    assert m, "Cargo.toml has no workspace version"
    return m.group(1)


def test_the_version_is_the_projects() -> None:
    assert tabos.__version__ == project_version()


def test_mypy_passes() -> None:
    # The configuration is pyproject.toml's [tool.mypy]: the package, its
    # functions all annotated, the generated stubs left out.
    o = subprocess.run([sys.executable, "-m", "mypy"], cwd=SDK, capture_output=True, text=True)
    assert o.returncode == 0, o.stdout + o.stderr


def test_pip_builds_a_wheel(tmp_path: Path) -> None:
    # From a copy of the package's files: a build leaves build/ behind, and
    # one left in the tree from before must not leak into this one.
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(SDK / "tabos", src / "tabos", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(SDK / f, src / f)
    out = tmp_path / "dist"
    o = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert o.returncode == 0, o.stdout + o.stderr
    wheels = list(out.glob("tabos-*.whl"))
    assert len(wheels) == 1, wheels
    assert wheels[0].name.startswith(f"tabos-{project_version()}-py3-none-any")
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for f in ["tabos/__init__.py", "tabos/aio.py", "tabos/workflows.py", "tabos/py.typed",
              "tabos/_proto/tabos_pb2.py", "tabos/_proto/tabos_pb2.pyi"]:
        assert f in names, f"{f} is not in the wheel: {sorted(names)}"
    # Nothing of the tree's build or tests goes with it.
    assert not any(n.startswith(("tests/", "build/")) for n in names), sorted(names)
