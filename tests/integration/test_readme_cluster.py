"""The README's command blocks run as written. Every `sh` and `python` block is marked on
the line before it: `<!-- runnable -->`, `<!-- runnable with: COMMAND -->` (COMMAND, such
as a worker, runs in the background meanwhile, until it logs its start) or
`<!-- not runnable: why -->` (a cluster or worker that runs until Ctrl-C, an excerpt, a
long fault run). Runnable blocks run in bash (python blocks in the venv's python) from a
folder laid out as a checkout (`.venv`, `examples/`) against a real 3-node cluster that
TSCTL_URL names, as `tsctl dev`'s would be."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
MARK = re.compile(r"^<!-- (runnable(?: with: (?P<with>.+?))?|not runnable: .+?) -->$")
FENCE = re.compile(r"^```(?P<lang>sh|python)$")
BLOCK_TIMEOUT_S = 120       # a bound only: the blocks take a few seconds
STARTED_LINE = "tsworker serving"


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    text: str
    runnable: bool
    background: str | None


def blocks(readme: str) -> list[Block]:
    """Every sh / python block with its mark; an unmarked one is an AssertionError."""
    lines = readme.split("\n")
    out = []
    for i, line in enumerate(lines):
        fence = FENCE.match(line)
        if not fence:
            continue
        mark = MARK.match(lines[i - 1]) if i else None
        assert mark, f"README.md line {i + 1}: mark the block runnable or not runnable"
        end = lines.index("```", i + 1)
        out.append(Block(i + 1, fence["lang"], "\n".join(lines[i + 1:end]),
                         mark[1].startswith("runnable"), mark["with"]))
    return out


RUNNABLE = [b for b in blocks((REPO / "README.md").read_text()) if b.runnable]


def test_every_block_is_marked_and_some_run():
    assert RUNNABLE, "no runnable block in README.md"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, cluster):
    """A folder laid out as the README's checkout, and the environment its commands get."""
    if not (VENV / "bin" / "tsctl").exists():
        pytest.skip("the tests do not run from a virtualenv holding tsctl")
    root = tmp_path_factory.mktemp("checkout")
    (root / ".venv").symlink_to(VENV)
    (root / "examples").symlink_to(REPO / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TSCTL_")}
    env["TSCTL_URL"] = ",".join(cluster.urls)
    env["PYTHONDONTWRITEBYTECODE"] = "1"    # nothing written into the real examples/
    return root, env


def _background(command: str, root: Path, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(["bash", "-c", command], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:     # ends at its exit: then the assertion below says why
        seen.append(line)
        if STARTED_LINE in line:   # the rest of its log is read (and dropped) meanwhile
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc
    raise AssertionError(f"{command!r} exited before it started:\n{''.join(seen)}")


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: f"README.md:{b.line}")
def test_a_runnable_block_runs_as_written(block, checkout):
    root, env = checkout
    helper = _background(block.background, root, env) if block.background else None
    try:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.text] if block.lang == "sh" \
            else [str(VENV / "bin" / "python"), "-c", block.text]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S)
    finally:
        if helper is not None:
            _stop(helper)
    assert done.returncode == 0, f"README.md line {block.line}:\n{done.stdout}\n{done.stderr}"
    assert "error:" not in done.stderr, done.stderr
