"""The command blocks of README.md and docs/from-celery.md run as written. Every `sh` and
`python` block is marked on the line before it:
- `<!-- runnable -->`;
- `<!-- runnable with: COMMAND -->`: COMMAND, such as a worker, runs in the background
  meanwhile, from its start (it logs STARTED_LINE) until after the last block that names
  the same COMMAND, so that the blocks of one page share one worker;
- `<!-- excerpt of: PATH -->`: the block is a verbatim piece of the file PATH (from the
  repository's root), which runs as a whole (a tasks module a worker serves);
- `<!-- not runnable: why -->` (a cluster or worker that runs until Ctrl-C, an excerpt, a
  long fault run, another product's code).
Runnable blocks run in bash (python blocks in the venv's python) from a folder laid out as
a checkout (`.venv`, `examples/`), in the page's own folder of it (DOCS), against one real
3-node cluster that TSCTL_URL names, as `tsctl dev`'s would be. A block that exits
non-zero, or prints `error:` on stderr, fails its test."""
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
MARK = re.compile(r"^<!-- (?P<kind>runnable(?: with: (?P<with>.+?))?|excerpt of: (?P<of>\S+)"
                  r"|not runnable: .+?) -->$")
FENCE = re.compile(r"^```(?P<lang>\S+)$")
CHECKED = ("sh", "python")          # the languages whose blocks are marked and run
MISSPELT = ("bash", "shell", "console", "py", "python3", "pycon")   # would escape the check
BLOCK_TIMEOUT_S = 120       # a bound only: the blocks take a few seconds
STARTED_LINE = "tsworker serving"


@dataclass(frozen=True)
class Doc:
    """A page whose blocks run: `cwd`, the folder of the checkout they run in; `activated`,
    the venv's bin/ first on PATH, as after `source .venv/bin/activate`."""
    path: str
    cwd: str = "."
    activated: bool = False


DOCS = (Doc("README.md"), Doc("docs/from-celery.md", cwd="examples", activated=True))


@dataclass(frozen=True)
class Block:
    doc: Doc
    line: int
    lang: str
    text: str
    runnable: bool
    background: str | None
    excerpt_of: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.path}:{self.line}"


def blocks(doc: Doc, text: str) -> list[Block]:
    """Every sh / python block with its mark; an unmarked one is an AssertionError."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        fence = FENCE.match(line)
        if not fence:
            continue
        assert fence["lang"] not in MISSPELT, \
            f"{doc.path} line {i + 1}: write ```sh or ```python, which this test checks"
        end = lines.index("```", i + 1)
        if fence["lang"] not in CHECKED:
            continue
        mark = MARK.match(lines[i - 1]) if i else None
        assert mark, f"{doc.path} line {i + 1}: mark the block runnable or not runnable"
        out.append(Block(doc, i + 1, fence["lang"], "\n".join(lines[i + 1:end]),
                         mark["kind"].startswith("runnable"), mark["with"], mark["of"]))
    return out


ALL = [b for doc in DOCS for b in blocks(doc, (REPO / doc.path).read_text())]
RUNNABLE = [b for b in ALL if b.runnable]
EXCERPTS = [b for b in ALL if b.excerpt_of]


def test_every_block_is_marked_and_some_run():
    for doc in DOCS:
        assert any(b.doc == doc for b in RUNNABLE), f"no runnable block in {doc.path}"


@pytest.mark.parametrize("block", EXCERPTS, ids=lambda b: b.where)
def test_an_excerpt_is_a_piece_of_its_file_as_it_is(block):
    assert block.text in (REPO / str(block.excerpt_of)).read_text(), \
        f"{block.where}: the block differs from {block.excerpt_of}: copy it again"


def test_a_block_that_fails_fails_its_test(checkout, helpers):
    """The check itself: a failing command and a failing python line are caught."""
    doc = DOCS[1]
    for lang, text in (("sh", "true\nfalse\ntrue"), ("python", "raise SystemExit(3)"),
                       ("sh", "echo 'error: refused' >&2")):
        with pytest.raises(AssertionError):
            _run(Block(doc, 0, lang, text, True, None), checkout, helpers)


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


def _env(doc: Doc, root: Path, env: dict) -> dict:
    if not doc.activated:
        return env
    return {**env, "VIRTUAL_ENV": str(root / ".venv"),
            "PATH": f"{root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"}


def _background(command: str, cwd: Path, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env,
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


def _key(block: Block) -> tuple[str, str]:
    return block.doc.cwd, str(block.background)


@pytest.fixture(scope="module")
def helpers():
    """The background commands running now, by (folder, command); all stopped at the end."""
    running: dict[tuple[str, str], subprocess.Popen] = {}
    yield running
    for proc in running.values():
        _stop(proc)


def _run(block: Block, checkout: tuple[Path, dict], helpers: dict) -> None:
    root, base_env = checkout
    cwd, env = root / block.doc.cwd, _env(block.doc, root, base_env)
    key = _key(block)
    if block.background and key not in helpers:
        helpers[key] = _background(block.background, cwd, env)
    try:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.text] if block.lang == "sh" \
            else [str(VENV / "bin" / "python"), "-c", block.text]
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S)
    finally:
        later = RUNNABLE[RUNNABLE.index(block) + 1:] if block in RUNNABLE else []
        if key in helpers and not any(_key(b) == key for b in later):
            _stop(helpers.pop(key))   # no later block needs it
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}\n{done.stderr}"
    assert "error:" not in done.stderr, f"{block.where}:\n{done.stderr}"


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_a_runnable_block_runs_as_written(block, checkout, helpers):
    _run(block, checkout, helpers)
