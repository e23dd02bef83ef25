"""Another revision's `client/` (for A/B runs of the Worker in one benchmark run), what the
benchmarks' Worker processes share (their loop and `--client-dir` flags), and the node
code other than this checkout's Python: another revision's, or the compiled build."""
from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tsched_tree import build_tree

from .machine import tsched_build

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


def add_worker_process_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop")
    p.add_argument("--client-dir", help="import `client` (another revision's) from here")


def run_worker_process(main, args: argparse.Namespace) -> int:
    """asyncio.run(main(args)) on the loop `--loop` asks for (uvloop when installed)."""
    if args.loop == "uvloop":
        try:
            import uvloop
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    asyncio.run(main(args))
    return 0


def extract_tree(rev: str, into: str) -> str:
    """That revision's node, state machine and client as the `tsched` package under `into`
    (a PYTHONPATH for nodes of that revision: an A/B of node code in one benchmark run)."""
    return str(build_tree(into, rev=rev))


def add_compiled_flag(p: argparse.ArgumentParser, baseline: bool = False) -> None:
    p.add_argument("--compiled", action="store_true",
                   help="this code's nodes run the compiled state machine (a wheel of this "
                        "checkout built with TSCHED_COMPILE=1, setup.py; needs a C compiler)")
    if baseline:
        p.add_argument("--baseline-compiled", action="store_true",
                       help="the baseline's nodes too (a wheel of that revision): an A/B of "
                            "code on the compiled build; without it --baseline runs Python")


def nodes_build(args: argparse.Namespace) -> str:
    """The build this code's nodes run: `--compiled`, or what this process imports (a
    PYTHONPATH of the compiled wheel, as `bench.all --compiled` sets, is inherited)."""
    return "compiled" if args.compiled else tsched_build()


def compiled_tree(into: str, rev: str | None = None) -> str:
    """This checkout (or revision `rev`, from `git archive`) as a wheel with the compiled
    state machine, unpacked under `into`: a PYTHONPATH for nodes of the compiled build.
    Raises when the build fell back to Python (a figure labelled compiled must be one)."""
    out = Path(into) / "wheel"
    source = REPO
    if rev is not None:
        source = Path(into) / "source"
        source.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(source)], capture_output=True, text=True,
        env={**os.environ, "TSCHED_COMPILE": "1"})
    wheels = sorted(out.glob("tsched-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise SystemExit(f"building the compiled wheel failed:\n{proc.stderr[-2000:]}")
    site = Path(into) / "site"
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(site)
    if not list((site / "tsched" / "statemachine").glob("machine.*.so")):
        raise SystemExit("the wheel holds no compiled state machine (no C compiler?)")
    return str(site)
