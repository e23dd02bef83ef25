"""`tsworker` on a temp project against a real 3-node cluster: results come back through
the decorated functions, a seconds-field periodic task fires, SIGTERM stops the worker
cleanly; a restart leaves an unchanged schedule alone, updates a changed one and prunes
only when asked; the project in examples/ runs as the README says; and `tsctl schedules
put` stores the same policies as the decorator."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from tsched.client import Client, TaskFailed
from tsched.client.cli import cli
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0
ROOT = Path(__file__).resolve().parents[2]
TSWORKER = shutil.which("tsworker") or str(Path(sys.executable).with_name("tsworker"))
PROJECT = '''
import time

from tsched.client import App, TaskContext

app = App("{urls}")


@app.task(priority=2)
def square(x: int, ctx: TaskContext, label: str = "sq") -> dict:
    return {{"label": label, "square": x * x, "attempt": ctx.attempt}}


@app.task(max_retries=0)
def boom() -> None:
    raise ValueError("boom")


@app.task
def slow(seconds: float) -> str:
    open(__file__ + ".slow-started", "w").close()   # the test stops the worker after this
    time.sleep(seconds)   # the work a SIGTERM finds running
    return "finished"


@app.periodic("{cron}", id="every-second", overlap="skip", catchup_window_s=30,
              start_at="2020-01-01T00:00:00Z", timeout_s=20,
              retry={{"backoff": "fixed", "base_s": 0.1, "max_s": 0.1}})
def every_second(ctx: TaskContext) -> str:
    return ctx.task_id
'''


class Running:
    def __init__(self, proc: subprocess.Popen, log: Path) -> None:
        self.proc, self.log_path = proc, log

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self) -> str:
        wait_until(lambda: "tsworker serving" in self.log or self.proc.poll() is not None,
                   DEADLINE_S, "the startup line")
        assert self.proc.poll() is None, self.log
        return next(line for line in self.log.splitlines() if "tsworker serving" in line)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(DEADLINE_S)


@contextmanager
def tsworker(cwd: Path, *args: str, env: dict[str, str] | None = None,
             log_dir: Path | None = None):
    log = (log_dir or cwd) / f"tsworker-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([TSWORKER, *args], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    running = Running(proc, log)
    try:
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def project(tmp_path, monkeypatch, cluster):
    """A temp project folder with `shop_tasks.py`, importable from this process too."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(cron: str = "* * * * * *") -> Path:
        sys.modules.pop("shop_tasks", None)
        (tmp_path / "shop_tasks.py").write_text(
            PROJECT.format(urls=",".join(cluster.urls), cron=cron))
        return tmp_path
    yield write
    sys.modules.pop("shop_tasks", None)
    with Client(cluster.urls) as c:
        for sched in list(c.list_schedules()):
            c.delete_schedule(sched["schedule_id"], tenant=sched["tenant"])


ASYNC_PROJECT = '''
import asyncio

from tsched.client import AsyncApp, TaskContext

app = AsyncApp("{urls}")


@app.task(name="greet")
async def greet(name: str, ctx: TaskContext) -> str:
    await asyncio.sleep(0.01)
    return f"hello {{name}} (attempt {{ctx.attempt}})"
'''


def test_an_async_app_submits_with_await_and_tsworker_runs_its_coroutines(tmp_path, cluster,
                                                                         monkeypatch):
    (tmp_path / "greetings.py").write_text(ASYNC_PROJECT.format(urls=",".join(cluster.urls)))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("greetings", None)
    import greetings

    async def produce() -> list:
        async with greetings.app:
            handles = [await greetings.greet.submit("ada")]
            handles += await greetings.greet.submit_many([(["bob"], {}), ([], {"name": "cy"})])
            return [await h.result(timeout_s=DEADLINE_S) for h in handles]

    with tsworker(tmp_path, "greetings:app") as worker:
        assert "1 tasks [greet], 0 schedules" in worker.wait_serving()
        assert asyncio.run(produce()) == [f"hello {n} (attempt 1)" for n in ("ada", "bob", "cy")]
        assert worker.stop() == 0, worker.log


def completed_fires(client: Client, schedule_id: str) -> list[dict]:
    return list(client.list(schedule_id=schedule_id, state="completed"))


def test_tsworker_serves_decorated_tasks_and_a_periodic_one(project, cluster):
    folder = project()
    with tsworker(folder, "shop_tasks", "--concurrency", "4") as worker:
        line = worker.wait_serving()
        assert ("4 tasks [shop_tasks.square, shop_tasks.boom, shop_tasks.slow, "
                "shop_tasks.every_second]") in line
        assert "1 schedules [every-second (* * * * * *, UTC)]" in line
        import shop_tasks
        assert shop_tasks.square.submit(7, label="seven").result(timeout_s=DEADLINE_S) == {
            "label": "seven", "square": 49, "attempt": 1}
        handles = shop_tasks.square.submit_many([([i], {}) for i in range(10)])
        assert [h.result(timeout_s=DEADLINE_S)["square"] for h in handles] == [
            i * i for i in range(10)]
        with pytest.raises(TaskFailed, match="ValueError"):
            shop_tasks.boom.submit().result(timeout_s=DEADLINE_S)
        with Client(cluster.urls) as c:
            fires = wait_until(lambda: len(completed_fires(c, "every-second")) >= 2 and
                               completed_fires(c, "every-second"),
                               DEADLINE_S, "two fires of every-second")
        assert {f["result"] for f in fires} == {f["task_id"] for f in fires}
        assert all(f["task_type"] == "shop_tasks.every_second" for f in fires)
        slow = shop_tasks.slow.submit(1.5)
        # "running" on the server means leased; a lease not yet started is given back on
        # SIGTERM. Wait for the handler itself.
        wait_until(lambda: list(folder.glob("*.slow-started")),
                   DEADLINE_S, "the slow task's handler to start")
        assert worker.stop() == 0, worker.log
        assert slow.result(timeout_s=5) == "finished"   # ran to its end within --grace
    assert "tsworker stopped" in worker.log
    assert " ERROR " not in worker.log and " CRITICAL " not in worker.log, worker.log


def test_a_restart_rewrites_only_changed_schedules_and_prunes_on_request(project, cluster):
    folder = project()
    with Client(cluster.urls) as c:
        c.put_schedule("by-hand", "0 3 * * *", "report")
        with tsworker(folder, "shop_tasks") as worker:
            worker.wait_serving()
            assert worker.stop() == 0, worker.log
        assert "schedule every-second created" in worker.log
        before = c.get_schedule("every-second")
        assert sorted(s["schedule_id"] for s in c.list_schedules()) == ["by-hand",
                                                                         "every-second"]
        with tsworker(folder, "shop_tasks", "--prune-schedules") as worker:
            worker.wait_serving()
            assert worker.stop() == 0, worker.log
        assert "schedule every-second unchanged" in worker.log
        assert "schedule by-hand deleted (tenant default)" in worker.log
        after = c.get_schedule("every-second")
        assert after["updated_at"] == before["updated_at"]
        assert [s["schedule_id"] for s in c.list_schedules()] == ["every-second"]

        c.pause_schedule("every-second")
        folder = project(cron="*/2 * * * * *")
        with tsworker(folder, "shop_tasks") as worker:
            assert "(*/2 * * * * *, UTC)" in worker.wait_serving()
            assert worker.stop() == 0, worker.log
        assert "schedule every-second updated: cron changed" in worker.log
        changed = c.get_schedule("every-second")
        assert (changed["cron"], changed["paused"]) == ("*/2 * * * * *", True)


def test_the_example_project_runs_as_the_readme_says(cluster, tmp_path):
    env = {"TSCTL_URL": ",".join(cluster.urls), "TICK_CRON": "* * * * * *"}
    examples = ROOT / "examples"
    try:
        with tsworker(examples, "tasks", "--concurrency", "4", env=env,
                      log_dir=tmp_path) as worker:
            worker.wait_serving()
            producer = subprocess.run([sys.executable, "producer.py", "3"], cwd=examples,
                                      env={**os.environ, **env}, capture_output=True,
                                      text=True, timeout=120)
            assert producer.returncode == 0, producer.stdout + producer.stderr
            assert "2 + 3 = 5" in producer.stdout
            assert "'sent_to': 'user2@example.com'" in producer.stdout
            with Client(cluster.urls) as c:
                wait_until(lambda: completed_fires(c, "examples-tick"), DEADLINE_S, "a tick")
            assert worker.stop() == 0, worker.log
    finally:
        with Client(cluster.urls) as c:
            c.delete_schedule("examples-tick")


def test_tsctl_schedules_put_stores_every_policy(cluster):
    result = CliRunner().invoke(cli, [
        "--url", ",".join(cluster.urls), "schedules", "put", "policies", "--cron",
        "*/5 * * * * *", "--task-type", "report", "--overlap", "buffer_one", "--misfire",
        "skip", "--catchup-window", "120", "--priority", "1", "--jitter", "2.5",
        "--start-at", "2030-01-01T00:00:00Z", "--end-at", "1924992000"])
    assert result.exit_code == 0, result.output
    with Client(cluster.urls) as c:
        stored = c.get_schedule("policies")
        c.delete_schedule("policies")
    assert (stored["overlap"], stored["misfire"], stored["catchup_window_s"],
            stored["jitter_s"], stored["task"]["priority"]) == ("buffer_one", "skip", 120, 2.5,
                                                                1)
    assert (stored["start_at"], stored["end_at"]) == ("2030-01-01T00:00:00.000Z",
                                                      "2031-01-01T00:00:00.000Z")
