"""Another revision's `client/` (for A/B runs of the Worker in one benchmark run)."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def extract_client(rev: str, into: str) -> str:
    """That revision's client/ as an importable `client` package under `into`."""
    archive = subprocess.run(["git", "archive", rev, "client"], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def worker_class(client_dir: str | None):
    """`tsched.client.Worker`, or the one of the `client` package extracted into client_dir."""
    if client_dir is None:
        from tsched.client import Worker
        return Worker
    sys.path.insert(0, client_dir)
    return importlib.import_module("client.worker").Worker
