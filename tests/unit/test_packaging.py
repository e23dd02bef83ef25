"""The distribution ships every module: a non-editable `pip install .` only installs the
packages pyproject.toml lists (DESIGN.md section 2 maps each folder to `tsched.<folder>`)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("statemachine", "node", "client")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_with_modules_is_a_listed_package():
    cfg = _setuptools()
    listed = set(cfg["packages"])
    for top in FOLDERS:
        assert cfg["package-dir"][f"tsched.{top}"] == top
        for d in sorted((ROOT / top).rglob("*")):
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
                dotted = "tsched." + ".".join(d.relative_to(ROOT).parts)
                assert dotted in listed, f"{dotted} is not in [tool.setuptools] packages"
                assert (d / "__init__.py").exists(), f"{d} has modules but no __init__.py"


def test_dashboard_files_are_package_data():
    """The dashboard's folder is a data-only package (setuptools warns about a folder that
    Python could import but the `packages` list leaves out), and all its files ship."""
    cfg = _setuptools()
    assert "tsched.node.api.static" in cfg["packages"]
    patterns = cfg["package-data"]["tsched.node.api.static"]
    static = [p for p in (ROOT / "node" / "api" / "static").iterdir() if p.is_file()]
    assert static, "the dashboard has no files"
    for f in static:
        assert any(f.match(p) for p in patterns), f
