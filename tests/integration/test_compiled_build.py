"""The optional compiled state machine (setup.py, `TSCHED_COMPILE=1 pip install .`): the
wheel holds it, the state machine's tests pass on it, a replica of either build computes
the same digests and answers, and a machine without a C compiler installs the Python one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEPT_PYTHON = ("__init__.py", "commands.py")   # as setup.py
BUILD_TIMEOUT_S = 600
pytestmark = pytest.mark.slow


def _wheel(out: Path, **env: str) -> tuple[Path, str]:
    """Builds a wheel of the checkout with the test environment's setuptools and mypy, its C
    compiled at -O0 (TSCHED_COMPILE_OPT, setup.py): the same generated code as a release
    build's -O3, in about two thirds of the time. CFLAGS set in the environment replace
    Python's own (-g -O3 -Wall ...); the test keeps the two that change what the C means
    (-DNDEBUG -fwrapv) and drops the warnings and debug info, which are not what it checks:
    the wheel builds in 17 s instead of 27 s here. A release build keeps Python's flags."""
    cflags = "-DNDEBUG -fwrapv"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "TSCHED_COMPILE": "1", "TSCHED_COMPILE_OPT": "0",
             "CFLAGS": cflags, **env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("tsched-*.whl")
    return wheel, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """The compiled wheel, unpacked: a PYTHONPATH entry ahead of the editable checkout."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler here")
    out = tmp_path_factory.mktemp("wheel")
    wheel, log = _wheel(out)
    assert "tsched: state machine compiled" in log, log[-3000:]
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_wheel_ships_the_dashboard(compiled: Path) -> None:
    """Package data travels with a regular install (an editable one reads the checkout)."""
    shipped = compiled / "tsched" / "node" / "api" / "static"
    for f in (ROOT / "node" / "api" / "static").iterdir():
        if f.is_file():
            assert (shipped / f.name).read_bytes() == f.read_bytes(), f.name


def _run(args: list[str], site: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)


def test_the_wheel_holds_every_compiled_module(compiled: Path) -> None:
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
    wheel, log = _wheel(tmp_path, CC="false")
    assert "installing the Python one" in log, log[-3000:]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert not [n for n in names if n.endswith(".so")]
    # At the wheel's root, or under its .data/purelib/ (a wheel set up for extensions that
    # then has none): either installs into site-packages.
    assert [n for n in names if n.split("purelib/")[-1] == "tsched/statemachine/machine.py"]


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
