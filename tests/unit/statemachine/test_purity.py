"""statemachine/ must stay pure: no I/O, clocks, randomness or environment (DESIGN 2, 3)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SM_DIR = Path(__file__).resolve().parents[3] / "statemachine"
FORBIDDEN_MODULES = {"time", "random", "uuid", "os", "asyncio", "threading", "socket",
                     "subprocess", "lmdb", "pysyncobj", "aiohttp", "secrets", "multiprocessing",
                     "gc"}   # the garbage collector is the node's business (node/gcpolicy.py)
FORBIDDEN_CALLS = {"now", "utcnow", "today"}


def _modules() -> list[Path]:
    files = sorted(SM_DIR.glob("*.py"))
    assert files, SM_DIR
    return files


def _violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"from {node.module} import")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in FORBIDDEN_CALLS:
                found.append(f"call .{node.func.attr}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("__import__", "open", "input"):
                found.append(f"call {node.func.id}()")
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_module_is_pure(path: Path) -> None:
    assert _violations(path.read_text()) == []


@pytest.mark.parametrize("snippet", [
    "import time", "import os.path", "from random import randint", "import uuid as u",
    "from datetime import datetime\ndatetime.now()", "import datetime\ndatetime.date.today()",
    "x.utcnow()", "from pysyncobj import SyncObj", "import asyncio", "open('f')",
])
def test_checker_catches(snippet: str) -> None:
    assert _violations(snippet), snippet


def test_checker_allows_pure_code() -> None:
    assert _violations("import hashlib\nimport heapq\nfrom .model import Task\nx.now_ms") == []


CLIENT_MAY_IMPORT = ("tsched.statemachine.limits", "tsched.statemachine.archive_format",
                     "tsched.statemachine.backup_format", "tsched.statemachine.tiers")


def test_client_imports_nothing_of_the_node_and_only_limits_and_archive_format() -> None:
    """tsctl and the Client take their bounds from statemachine/limits.py, and `tsctl archive`
    the audit archive's file format from statemachine/archive_format.py (the nodes write
    it), `tsctl backup` the backup file's from statemachine/backup_format.py, workers the tier
    names of their ranges from statemachine/tiers.py, and nothing else from the server side (DESIGN section 2: the client speaks only
    HTTP)."""
    client_dir = SM_DIR.parent / "client"
    for path in sorted(client_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module if node.level == 0 else "." * node.level + node.module]
            for name in names:
                assert not name.startswith(("tsched.node", "..node")), (path.name, name)
                if name.startswith("tsched.statemachine"):
                    assert name in CLIENT_MAY_IMPORT, (path.name, name)
