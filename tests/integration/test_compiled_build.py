"""The optional compiled state machine, built as README tells a user to build it: in a fresh
virtualenv, `TSCHED_COMPILE=1 pip install .` with pip's default build isolation (an
isolated build environment that holds only what setup.py asks for). The install's nodes
log `state_machine=compiled`, the state machine's tests pass on its modules, a replica of
either build computes the same digests and answers; with no C compiler on PATH the same
command installs the Python build and says so in one line.

One compiled build serves every check of it (the install's `tsched/` is put ahead of the
checkout on PYTHONPATH); the fallback's build stops before mypyc and installs no
dependencies (`--no-deps`: they are the compiled install's), so it costs a few seconds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
KEPT_PYTHON = ("__init__.py", "commands.py")   # as setup.py
BUILD_TIMEOUT_S = 900
README_COMMAND = ["pip", "install", "-v", "."]   # README, with -v: pip shows the build's lines
# The virtualenvs are made without pip of their own (venv's ensurepip: some 4 CPU-s each);
# this environment's pip installs into them (`pip --python`, which runs pip under that
# interpreter): the same command, the same isolated build, the venv's own site-packages.
PIP = [sys.executable, "-m", "pip", "--python"]
FALLBACK_LINE = "tsched: the compiled state machine could not be built"
# A build in a fresh virtualenv (dependencies, the isolated build environment, mypyc, the C)
# outlasts the suite's 300 s per test on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S)]


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=120)
    return where


def _site(venv: Path) -> Path:
    (site,) = venv.glob("lib/python*/site-packages")
    return site


def _install(venv: Path, *extra: str, **env: str) -> str:
    """README's command, run at the checkout's root by pip for the venv's Python. The C is
    compiled at -O0 (TSCHED_COMPILE_OPT, setup.py), without debug information
    (TSCHED_COMPILE_DEBUG) and without warnings (CFLAGS replace Python's own; the two that
    change what the C means stay): the same generated code as a release build's, in a
    fraction of the time."""
    proc = subprocess.run(
        [*PIP, str(venv / "bin" / "python"), *README_COMMAND[1:], *extra], cwd=ROOT,
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "TSCHED_COMPILE": "1", "TSCHED_COMPILE_OPT": "0",
             "TSCHED_COMPILE_DEBUG": "0",
             "CFLAGS": "-DNDEBUG -fwrapv", **env})
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "Successfully installed" in log, log[-3000:]
    return log


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the compiled build installed by README's command."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler here")
    venv = _venv(tmp_path_factory.mktemp("compiled") / "venv")
    log = _install(venv)
    assert "tsched: state machine compiled" in log, log[-5000:]
    assert FALLBACK_LINE not in log, log[-5000:]
    return venv


@pytest.fixture(scope="module")
def compiled(installed: Path, tmp_path_factory) -> Path:
    """A PYTHONPATH entry holding only the install's `tsched/`: ahead of the editable
    checkout, with this environment's test tools and libraries."""
    site = tmp_path_factory.mktemp("site")
    (site / "tsched").symlink_to(_site(installed) / "tsched", target_is_directory=True)
    return site


def test_the_install_s_nodes_run_the_compiled_build(installed: Path, tmp_path: Path) -> None:
    with Cluster(tmp_path, size=3) as c:
        c.command = [str(installed / "bin" / "tsnode")]
        c.start()
        c.wait_leader()
        for node in c.ids:
            wait_until(lambda n=node: "event=http_listening" in c.log(n, 100_000),
                       timeout_s=30, what=f"{node} listening")
            assert "state_machine=compiled" in c.log(node, 100_000), c.log(node)


def test_the_install_ships_the_dashboard(installed: Path) -> None:
    """Package data travels with a regular install (an editable one reads the checkout)."""
    shipped = _site(installed) / "tsched" / "node" / "api" / "static"
    for f in (ROOT / "node" / "api" / "static").iterdir():
        if f.is_file():
            assert (shipped / f.name).read_bytes() == f.read_bytes(), f.name


def _run(args: list[str], site: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)


def test_the_install_holds_every_compiled_module(compiled: Path) -> None:
    sm = compiled / "tsched" / "statemachine"
    expected = sorted(p.stem for p in (ROOT / "statemachine").glob("*.py")
                      if p.name not in KEPT_PYTHON)
    assert sorted(p.name.split(".")[0] for p in sm.glob("*.so")
                  if not p.name.startswith("_compiled")) == expected
    assert list(sm.glob("_compiled__mypyc.*.so")), "the shared library is missing"
    probe = _run(["-c", "import tsched.statemachine.machine as m; print(m.__file__)"], compiled)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().endswith(".so") and str(compiled) in probe.stdout


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replicas_of_either_build_agree(compiled: Path, seed: int) -> None:
    """A cluster may mix builds (a rolling upgrade): the same log must give the same
    digests and the same answers on both."""
    got = {}
    for site in (None, compiled):
        proc = _run(["-m", "tests.integration.sm_workload", "--seed", str(seed),
                     "--steps", "4000"], site)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        got[out.pop("build")] = out
    assert set(got) == {"python", "compiled"}
    assert got["compiled"] == got["python"]
    assert got["python"]["tasks"] > 100


def test_the_state_machine_tests_pass_on_the_compiled_build(compiled: Path) -> None:
    sm_tests = ROOT / "tests" / "unit" / "statemachine"
    tests = sorted(str(p.relative_to(ROOT)) for p in sm_tests.glob("test_sm_*.py"))
    assert len(tests) >= 10, tests    # the folder really holds them
    proc = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", *tests,
                 "tests/unit/node/raft/test_raft_restore.py", "tests/property"], compiled)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


def test_without_a_c_compiler_the_python_build_installs(tmp_path: Path) -> None:
    """PATH holds the venv's programs only: no gcc, no cc. The build says so in one line
    and installs the Python modules."""
    venv = _venv(tmp_path / "venv")
    log = _install(venv, "--no-deps", PATH=str(venv / "bin"))
    lines = [line.strip() for line in log.splitlines() if line.strip().startswith("tsched:")]
    assert len(lines) == 1 and lines[0].startswith(FALLBACK_LINE), lines or log[-3000:]
    assert "installing the Python one" in lines[0]
    sm = _site(venv) / "tsched" / "statemachine"
    assert (sm / "machine.py").is_file()
    assert not list(sm.glob("*.so"))


def test_an_editable_build_stays_python(tmp_path: Path) -> None:
    """Compiled modules beside their sources would be imported instead of them: an edited
    source would not run. So `build_ext --inplace` (what `pip install -e .` runs) makes none."""
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace",
                           "--build-temp", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S,
                          env={**os.environ, "TSCHED_COMPILE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "an editable install keeps the state machine in Python" in proc.stderr
    assert not list((ROOT / "statemachine").glob("*.so"))
