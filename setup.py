"""An optional compiled build of the state machine (everything else is in pyproject.toml).

`TSCHED_COMPILE=1 pip install .` compiles `statemachine/` with mypyc (a C compiler and
Python's headers needed): the same code, the same results, 13-17% less of a replica's
state-machine CPU (bench/notes/2026-12-02-compiled-state-machine.md; 25% in
bench/notes/2026-12-03-where-the-cpu-goes.md). Without the
variable, or when anything of the build fails (no compiler, no headers), the install is
the plain Python package and says so; nothing else changes.

Only a regular install is compiled, never an editable one (`pip install -e .`): compiled
modules sit beside their sources and are imported instead of them, so an edited source
would silently not run.
"""
from __future__ import annotations

import os
import shutil
import sys
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
_generated: list[Extension] = []


def compiled_sources() -> list[str]:
    return sorted(p.name for p in SM_DIR.glob("*.py") if p.name not in KEPT_PYTHON)


def _say(message: str) -> None:
    print(f"tsched: {message}", file=sys.stderr)


def _fallback(exc: BaseException) -> None:
    _say(f"the compiled state machine could not be built ({exc.__class__.__name__}: "
         f"{str(exc)[:300]}); installing the Python one, which computes the same")


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
        try:
            _check_compiler()
            _generated.extend(self._mypycify())
            return _generated
        except Exception as exc:  # noqa: BLE001 - any failure means: install the Python one
            _fallback(exc)
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
                group_name=GROUP, target_dir=str(work / "c"), opt_level=OPT_LEVEL)
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
    setup_requires=["mypy>=1.10,<3"] if WANTED else [],
)
