"""An optional compiled build of the state machine (everything else is in pyproject.toml).

`TSCHED_COMPILE=1 pip install .` compiles `statemachine/` with mypyc (a C compiler and
Python's headers needed): the same code, the same results, 13-17% less of a replica's
state-machine CPU (bench/notes/2026-12-02-compiled-state-machine.md; 25% in
bench/notes/2026-12-03-where-the-cpu-goes.md). Without the
variable, or when anything of the build fails (no compiler, no headers, a type mypyc cannot
find), the install is the plain Python package and says so in one `tsched:` line (pip
shows a build's lines with `-v`); nothing else changes.

The build's own requirements are asked for only with the variable (`build_requires`):
mypy (mypyc) and the libraries whose types the state machine's modules use, so that pip's
isolated build environment, which holds nothing of the project's dependencies, can
type-check them. `python -m build --wheel` asks for the same.

Only a regular install is compiled, never an editable one (`pip install -e .`): compiled
modules sit beside their sources and are imported instead of them, so an edited source
would silently not run.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SM_DIR = ROOT / "statemachine"
# Stay Python: the package's lazy `__init__`, and the commands, whose fields hold whatever a
# log entry holds until validated (a compiled class would check their declared types) and
# whose decoder builds them by setting slots (statemachine/codec.py).
KEPT_PYTHON = ("__init__.py", "commands.py")
# Every compiled module shares one library, a module of the package (not a top-level one).
GROUP = "tsched.statemachine._compiled"
WANTED = os.environ.get("TSCHED_COMPILE", "") == "1"
# The C compiler's optimisation level (mypyc's default, 3). The test suite builds at 0: the
# same generated C, compiled in a fraction of the time; a release build keeps 3.
OPT_LEVEL = os.environ.get("TSCHED_COMPILE_OPT", "3")
# The debug information it writes (mypyc's default, 1: line tables, so that a crash's
# backtrace names the C line). The test suite builds at 0: a fifth less of the compiler's
# time on the 18 MB of generated C, and nothing of what runs changes.
DEBUG_LEVEL = os.environ.get("TSCHED_COMPILE_DEBUG", "1")
_generated: list[Extension] = []
# The installed libraries the compiled modules import with types (mypy reads their hints):
# missing from the build environment, mypy stops with "Cannot find implementation".
TYPED_IMPORTS = ("orjson",)
# Commands that compile: the metadata (`dist_info`, `egg_info`) and `sdist` steps also set
# build_ext up, to list its sources, and must not spend mypyc's half minute on it.
BUILDING = ("build", "bdist", "install")


def build_requires() -> list[str]:
    """mypy, and the project's own pins of TYPED_IMPORTS (pyproject.toml, one source)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    typed = [d for d in deps if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] in TYPED_IMPORTS]
    return ["mypy>=1.10,<3", *typed]


def compiled_sources() -> list[str]:
    return sorted(p.name for p in SM_DIR.glob("*.py") if p.name not in KEPT_PYTHON)


def _say(message: str) -> None:
    print(f"tsched: {message}", file=sys.stderr)


def _fallback(exc: BaseException, detail: str = "") -> None:
    """The one line a failed compiled build prints (README); `detail`: the first line of
    what the failing step printed (mypy's first error), when the exception says nothing."""
    reason = detail or str(exc)
    _say(f"the compiled state machine could not be built ({exc.__class__.__name__}: "
         f"{reason[:300]}); installing the Python one, which computes the same")


def _compiler_works() -> bool:
    try:
        _check_compiler()
        return True
    except Exception:  # noqa: BLE001 - whatever it is, the build will say so (one line)
        return False


def _check_compiler() -> None:
    """Compile an empty C file first: without a working compiler the Python package is
    installed at once, not after mypyc has spent its half minute generating C."""
    import subprocess
    import sysconfig

    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc")
    proc = subprocess.run([*cc.split(), "-x", "c", "-c", "-o", os.devnull, "-"],
                          input="int tsched_probe;\n", capture_output=True, text=True,
                          timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"the C compiler {cc!r} does not work: {proc.stderr.strip()[:200]}")


def _first_error(output: str) -> str:
    errors = [line for line in output.splitlines() if ": error:" in line]
    return errors[0].strip() if errors else ""


class BuildExt(build_ext):
    """Generates the C code when the build is set up (not each time pip runs this file),
    and falls back to the Python package when the compiled one cannot be built."""

    def finalize_options(self) -> None:
        self.distribution.ext_modules = self._extensions()
        super().finalize_options()

    def _extensions(self) -> list[Extension]:
        if not WANTED:
            return []
        if _generated:   # pip may set the command up more than once: generate once
            return _generated
        if self.editable_mode or self.inplace:
            _say("an editable install keeps the state machine in Python (TSCHED_COMPILE "
                 "applies to `pip install .`)")
            return []
        if not any(cmd.startswith(BUILDING) for cmd in self.distribution.commands):
            return []   # metadata or sdist: nothing is compiled in this process
        output = io.StringIO()
        try:
            _check_compiler()
            # mypy's errors go to stdout, then it exits (SystemExit, not an Exception):
            # both are caught, and the first error goes into the one line.
            with contextlib.redirect_stdout(output):
                _generated.extend(self._mypycify())
            return _generated
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure: Python build
            _fallback(exc, _first_error(output.getvalue()))
            return []

    def run(self) -> None:
        if not self.extensions and not self.inplace:
            self._discard_earlier_builds()
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler, no headers, ...
            self._discard_outputs()
            _fallback(exc)
            return
        if self.extensions:
            _say(f"state machine compiled: {len(self.extensions)} extension modules")

    def _mypycify(self) -> list[Extension]:
        from mypyc.build import mypycify   # build requirement only when TSCHED_COMPILE=1

        # mypyc names a module by its path: compile a copy laid out as its package is named.
        sys.path.insert(0, str(ROOT))   # tsched_tree.py, beside this file (not installed)
        from tsched_tree import build_tree

        work = ROOT / "build" / "mypyc"
        shutil.rmtree(work, ignore_errors=True)
        build_tree(work / "src", packages=("statemachine",), init=False)
        here = os.getcwd()
        os.chdir(work / "src")
        try:
            paths = [f"tsched/statemachine/{name}" for name in compiled_sources()]
            return mypycify(
                paths + ["--explicit-package-bases", f"--config-file={ROOT / 'pyproject.toml'}"],
                group_name=GROUP, target_dir=str(work / "c"), opt_level=OPT_LEVEL,
                debug_level=DEBUG_LEVEL)
        finally:
            os.chdir(here)

    def _discard_earlier_builds(self) -> None:
        """A Python build ships no compiled module that an earlier build left in the build
        directory: it would be imported instead of the source beside it."""
        for stale in (Path(self.build_lib) / "tsched" / "statemachine").glob("*.so"):
            stale.unlink()

    def _discard_outputs(self) -> None:
        for ext in self.extensions:
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)


setup(
    cmdclass={"build_ext": BuildExt},
    # One placeholder makes setuptools run build_ext; BuildExt puts the real modules in.
    ext_modules=[Extension(f"{GROUP}__placeholder", sources=[])] if WANTED else [],
    # setuptools' build backend hands these to pip as the build's own requirements
    # (get_requires_for_build_wheel): installed in the isolated build environment. Without
    # a working compiler none are asked for: the build falls back before needing them.
    setup_requires=build_requires() if WANTED and _compiler_works() else [],
)
