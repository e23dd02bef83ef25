"""The App modules pass `mypy --strict`, and a decorated function keeps its signature for
the type checker (a wrong argument to a direct call is reported)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tsched_tree import build_tree

ROOT = Path(__file__).resolve().parents[3]
# The modules of tasks-as-functions and tsworker; the older client modules are not typed
# strictly: --follow-imports=silent takes their annotations without checking their bodies.
STRICT_MODULES = ["client/app.py", "client/app_task.py", "client/_appcall.py",
                  "client/handles.py", "client/schedule_sync.py", "client/tsworker.py"]
USER_CODE = '''
from tsched.client import App, TaskContext, TaskFailed

app = App("http://127.0.0.1:8701")

@app.task(max_retries=5, retry_on=(ConnectionError,))
def send_email(to: str, subject: str = "hi") -> dict[str, str]:
    return {"sent_to": to}

@app.periodic("*/5 * * * * *", id="tick")
def tick(ctx: TaskContext) -> int:
    return ctx.attempt

sent: dict[str, str] = send_email("ada@example.com", subject="x")
attempt: int = tick(TaskContext("t", "e", 1, 1, "tick", None, None))
handle = send_email.using(priority=1).submit("ada@example.com", delay_s=10)
state: str = handle.status()
try:
    handle.result(timeout_s=30)
except TaskFailed as exc:
    print(exc.last_error)
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One mypy cache for the module's three runs: the standard library and the client's
    imports are analysed once, not three times (half the file's time)."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, *args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(path)} if path else None
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           f"--cache-dir={cache}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=env)


def source_tree(tmp_path: Path) -> Path:
    """`tsched.client` as mypy can find it (the editable install maps it at import time)."""
    return build_tree(tmp_path / "src", packages=("client",), link=True, init=False)


def test_the_app_modules_pass_mypy_strict(cache):
    out = mypy(cache, *STRICT_MODULES)
    assert out.returncode == 0, out.stdout + out.stderr


def test_user_code_type_checks_and_a_wrong_argument_is_reported(cache, tmp_path):
    good = tmp_path / "good_tasks.py"
    good.write_text(USER_CODE)
    out = mypy(cache, str(good), path=source_tree(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    bad = tmp_path / "bad_tasks.py"
    bad.write_text(USER_CODE + "send_email(42)\n")
    out = mypy(cache, str(bad), path=tmp_path / "src")
    assert out.returncode == 1 and 'incompatible type "int"' in out.stdout, out.stdout
