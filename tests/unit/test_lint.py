"""ruff (pyproject.toml's small rule set) over the whole project, and mypy (every function
annotated) over statemachine/, node/ and client/ as their installed packages."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tsched_tree import build_tree

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the test extra: pip install -e '.[test]')")
    out = _run([ruff, "check", "--no-cache", "."], ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_packages_type_check(tmp_path: Path) -> None:
    """mypy reads the packages through links laid out as they are installed (an editable
    install maps them at import time, which mypy cannot follow)."""
    tree = build_tree(tmp_path, link=True, init=False)
    out = _run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null",
                f"--config-file={ROOT / 'pyproject.toml'}", "-p", "tsched.statemachine",
                "-p", "tsched.node", "-p", "tsched.client"], tree)
    assert out.returncode == 0, out.stdout + out.stderr
