"""The one place that lays out a `tsched/` package tree on disk.

The repository keeps `statemachine/`, `node/` and `client/` at its top (DESIGN.md section 2);
an install maps them to `tsched.statemachine`, `tsched.node` and `tsched.client`. An editable
install does that at import time, which tools that read files cannot follow, so every tool
that needs real files under a `tsched/` folder asks this module for them:

- `setup.py`: mypyc compiles a copy of `statemachine/` laid out as its package is named;
- the type checks (`tests/unit/test_lint.py`): mypy reads links into this checkout;
- the fault harness (`tests/jepsen_like`): a frozen copy of the code a run started with, so
  a node restarted mid-run runs the same code;
- the benchmarks' A/B runs (`bench/lib/revision.py`): another git revision's code.

`build_tree(dest, ...)` returns `dest`, the folder to put on `sys.path`, `PYTHONPATH` or
`MYPYPATH`. This module is not installed; it is imported from the checkout's root.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent
PACKAGES = ("statemachine", "node", "client")
_INIT = '"""tsched, laid out by tsched_tree.py."""\n'
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def build_tree(dest: str | Path, *, packages: Sequence[str] = PACKAGES,
               source: str | Path | None = None, installed: bool = False,
               rev: str | None = None, link: bool = False, init: bool = True) -> Path:
    """Lay out `dest/tsched/<package>` for each of `packages` and return `dest`.

    The packages come from this checkout, or from `source` (a folder holding them, or with
    `installed=True` a folder holding `tsched/` as installed, e.g. an unpacked wheel), or
    from the git revision `rev` of this repository. `link=True` links the checkout's folders
    instead of copying them (for readers such as mypy: nothing is frozen). `init=False`
    leaves `tsched/` without an `__init__.py` (a namespace package, as installed)."""
    dest = Path(dest)
    pkg = dest / "tsched"
    pkg.mkdir(parents=True, exist_ok=True)
    if init:
        (pkg / "__init__.py").write_text(_INIT, encoding="utf-8")
    if rev is not None:
        _extract_revision(rev, packages, pkg)
        return dest
    for name in packages:
        src = _source_of(name, source, installed)
        if not src.is_dir():
            raise FileNotFoundError(f"no package folder {src}")
        target = pkg / name
        if link:
            target.symlink_to(src, target_is_directory=True)
        else:
            shutil.copytree(src, target, ignore=_IGNORED, dirs_exist_ok=True)
    return dest


def _source_of(name: str, source: str | Path | None, installed: bool) -> Path:
    root = Path(source) if source is not None else REPO
    return (root / "tsched" / name) if installed else (root / name)


def _extract_revision(rev: str, packages: Sequence[str], pkg: Path) -> None:
    """`git archive REV <packages>` unpacked under `pkg` (files only, as committed)."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev, *packages], cwd=REPO,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(pkg, filter="data")
