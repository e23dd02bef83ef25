"""The Worker against a real 3-node cluster: throughput of results, retries and dead
letters, a worker killed mid-task, cancellation reaching a running handler."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tsched.client import Client, NonRetryable, Worker

from tests.harness.waits import wait_until
from tests.integration.worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow
FAST_RETRY = {"backoff": "fixed", "base_s": 0.1, "max_s": 0.1, "jitter": 0}


def state_of(client: Client, task_id: str) -> str:
    return client.get(task_id)["state"]


@pytest.fixture
def client(cluster):
    with Client(cluster.urls, timeout_s=30) as c:
        yield c


def test_fifty_tasks_completed_by_four_threads_with_results(cluster, client):
    threads_seen = set()

    def square(payload, ctx):
        threads_seen.add(threading.current_thread().name)
        time.sleep(0.02)   # long enough that the four threads overlap
        return {"square": payload["n"] ** 2, "attempt": ctx.attempt}
    ids = [client.submit("square", {"n": n})["task_id"] for n in range(50)]
    with running(Worker(cluster.urls, {"square": square}, concurrency=4, wait_s=1)):
        wait_until(lambda: all(state_of(client, i) == "completed" for i in ids),
                   DEADLINE_S, "50 completions")
    for n, task_id in enumerate(ids):
        task = client.get(task_id)
        assert task["result"] == {"square": n * n, "attempt": 1}
        assert [a["outcome"] for a in task["attempts"]] == ["completed"]
    assert 1 < len(threads_seen) <= 4


def test_exception_is_retried_then_dead_lettered(cluster, client):
    calls = []

    def flaky(payload, ctx):
        calls.append(ctx.attempt)
        raise ValueError(f"broken on attempt {ctx.attempt}")
    task_id = client.submit("flaky", max_retries=2, retry=FAST_RETRY)["task_id"]
    with running(Worker(cluster.urls, {"flaky": flaky}, wait_s=1)):
        wait_until(lambda: state_of(client, task_id) == "dead_letter", DEADLINE_S, "dead letter")
    task = client.get(task_id)
    assert calls == [1, 2, 3]
    assert [a["outcome"] for a in task["attempts"]] == ["failed"] * 3
    assert task["last_error"] == "ValueError: broken on attempt 3"   # "Type: message"
    assert task["attempts"][0]["error_detail"]["message"] == "broken on attempt 1"
    assert task_id in [t["task_id"] for t in client.dlq_list()]


def test_nonretryable_dead_letters_at_once(cluster, client):
    def refuse(payload, ctx):
        raise NonRetryable("bad payload")
    task_id = client.submit("refuse", max_retries=5, retry=FAST_RETRY)["task_id"]
    with running(Worker(cluster.urls, {"refuse": refuse}, wait_s=1)):
        wait_until(lambda: state_of(client, task_id) == "dead_letter", DEADLINE_S, "dead letter")
    task = client.get(task_id)
    assert len(task["attempts"]) == 1 and "bad payload" in task["last_error"]


def test_cancel_reaches_a_running_handler(cluster, client):
    started, saw = threading.Event(), {}

    def long_job(payload, ctx):
        started.set()
        saw["cancelled"] = ctx.cancelled.wait(DEADLINE_S)
        raise RuntimeError("stopped on request")
    task_id = client.submit("long_job")["task_id"]
    with running(Worker(cluster.urls, {"long_job": long_job}, lease_s=1.5, wait_s=1)):
        assert started.wait(DEADLINE_S)
        client.cancel(task_id)
        wait_until(lambda: state_of(client, task_id) == "cancelled", DEADLINE_S, "cancelled")
    assert saw["cancelled"] is True


KILLABLE_WORKER = """
import sys, time, pathlib
from tsched.client import Worker
def hold(payload, ctx):
    # Written then renamed, so the test never sees the marker without its token.
    partial = pathlib.Path(sys.argv[2] + ".partial")
    partial.write_text(str(ctx.fencing_token))
    partial.rename(sys.argv[2])
    time.sleep(120)
Worker(sys.argv[1], {"hold": hold}, lease_s=2, wait_s=1).run()
"""


PROGRESS_SEEN_S = 2.0   # a handler's progress is visible this soon (DESIGN 9)


def _progress_seen(client: Client, task_id: str, fraction: float, message: str) -> dict:
    """Polls GET /v1/tasks/{id} until it shows the progress; fails after PROGRESS_SEEN_S."""
    seen: dict = {}

    def shown() -> bool:
        seen.update(client.get(task_id))
        p = seen.get("progress") or {}
        return p.get("fraction") == fraction and p.get("message") == message
    wait_until(shown, PROGRESS_SEEN_S, f"progress {fraction} {message!r} of {task_id}")
    return seen


def test_handler_progress_is_visible_through_the_api_and_tsctl(cluster, client):
    from click.testing import CliRunner
    from tsched.client.cli import cli
    reported, release = threading.Event(), threading.Event()

    def long_sync(payload, ctx):
        ctx.progress(0.1, "starting")
        ctx.progress(0.5, "half")   # within a second of the first: the latest wins
        reported.set()
        release.wait(DEADLINE_S)
        return "done"

    async def long_async(payload, ctx):
        import asyncio
        ctx.progress(0.25, "a quarter")
        while not release.is_set():
            await asyncio.sleep(0.02)
        return "done"
    sync_id = client.submit("progress_sync")["task_id"]
    async_id = client.submit("progress_async")["task_id"]
    handlers = {"progress_sync": long_sync, "progress_async": long_async}
    with running(Worker(cluster.urls, handlers, concurrency=2, wait_s=1)):
        wait_until(reported.is_set, DEADLINE_S, "the sync handler reported")
        task = _progress_seen(client, sync_id, 0.5, "half")
        assert task["state"] == "running"
        _progress_seen(client, async_id, 0.25, "a quarter")
        def tsctl_shows() -> bool:
            out = CliRunner().invoke(cli, ["--url", ",".join(cluster.urls), "get", sync_id],
                                     catch_exceptions=False)
            return out.exit_code == 0 and " 50%  half" in out.output
        wait_until(tsctl_shows, PROGRESS_SEEN_S, "tsctl get shows the progress")
        release.set()
        out = CliRunner().invoke(cli, ["--url", ",".join(cluster.urls), "wait", sync_id,
                                       "--timeout", str(DEADLINE_S)], catch_exceptions=False)
        assert out.exit_code == 0 and "completed" in out.output, out.output
        wait_until(lambda: state_of(client, sync_id) == state_of(client, async_id)
                   == "completed", DEADLINE_S, "both completed")
    assert client.get(sync_id)["progress"] is None   # the attempt ended: so did its progress


def _capacity(cluster, node: str, task_type: str) -> tuple[float, float, float]:
    """(ready tasks, busy slots, idle slots) of `task_type` in `node`'s /metrics."""
    from tests.integration.test_metrics_cluster import scrape
    got = scrape(cluster, node)

    def value(name: str, **labels: str) -> float:
        return got.get(name, {}).get(tuple(sorted({**labels, "task_type": task_type}.items())),
                       0.0)
    return (value("tsched_ready_tasks"), value("tsched_worker_slots", state="busy"),
            value("tsched_worker_slots", state="idle"))


def test_ready_tasks_and_worker_slots_move_as_workers_fill_and_drain(cluster, client):
    """The autoscaling signals (DESIGN 14.4) at the leader, as a real Worker takes a
    backlog: 6 ready tasks and no slots; 2 busy slots and 4 ready; then drained."""
    task_type, release = "scale-fill", threading.Event()

    def hold(payload, ctx):
        release.wait(DEADLINE_S)
    leader = cluster.wait_leader()
    later = client.submit(task_type, delay_s=600)["task_id"]   # future-dated: never ready
    ids = [client.submit(task_type)["task_id"] for _ in range(6)]
    wait_until(lambda: _capacity(cluster, leader, task_type) == (6, 0, 0), DEADLINE_S,
               "6 ready tasks, no worker")
    worker = Worker(cluster.urls, {task_type: hold}, concurrency=2, wait_s=1, lease_s=3,
                    claim_ahead=0)
    with running(worker):
        wait_until(lambda: _capacity(cluster, leader, task_type) == (4, 2, 0), DEADLINE_S,
                   "2 busy slots, 4 tasks ready")
        release.set()
        wait_until(lambda: all(state_of(client, i) == "completed" for i in ids), DEADLINE_S,
                   "the backlog done")
        wait_until(lambda: _capacity(cluster, leader, task_type) == (0, 0, 2), DEADLINE_S,
                   "drained: nothing ready, both slots idle")
    client.cancel(later)


def test_killed_worker_task_is_rerun_by_another_after_its_lease(cluster, client, tmp_path):
    marker = tmp_path / "started"
    task_id = client.submit("hold", retry=FAST_RETRY)["task_id"]
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE_WORKER, ",".join(cluster.urls),
                             str(marker)], start_new_session=True)
    try:
        wait_until(marker.exists, DEADLINE_S, "the first worker to start the task")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    first_token = int(marker.read_text())
    second = Worker(cluster.urls, {"hold": lambda p, ctx: {"token": ctx.fencing_token}}, wait_s=1)
    with running(second):
        wait_until(lambda: state_of(client, task_id) == "completed", DEADLINE_S, "the re-run")
    task = client.get(task_id)
    assert [a["outcome"] for a in task["attempts"]] == ["lease_expired", "completed"]
    assert task["result"]["token"] > first_token


STOPPABLE_WORKER = """
import sys, time, pathlib
from tsched.client import Worker
def job(payload, ctx):
    pathlib.Path(sys.argv[2]).write_text("started")
    deadline = time.monotonic() + payload["work_s"]
    while time.monotonic() < deadline and not ctx.cancelled.is_set():
        time.sleep(0.01)
    return "finished" if not ctx.cancelled.is_set() else "gave up"
Worker(sys.argv[1], {"job": job}, grace_s=float(sys.argv[3]), wait_s=1).run()
"""


def run_until_sigterm(cluster, marker, grace_s: float) -> int:
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE_WORKER, ",".join(cluster.urls),
                             str(marker), str(grace_s)], start_new_session=True)
    try:
        wait_until(marker.exists, DEADLINE_S, "the handler to start")
        proc.send_signal(signal.SIGTERM)
        return proc.wait(DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_sigterm_lets_a_running_task_finish_within_grace(cluster, client, tmp_path):
    task_id = client.submit("job", {"work_s": 1.0})["task_id"]
    assert run_until_sigterm(cluster, tmp_path / "m", grace_s=30) == 0
    task = client.get(task_id)
    assert task["state"] == "completed" and task["result"] == "finished"


def test_sigterm_gives_back_what_outlives_grace(cluster, client, tmp_path):
    task_id = client.submit("job", {"work_s": 120}, retry=FAST_RETRY)["task_id"]
    assert run_until_sigterm(cluster, tmp_path / "m", grace_s=0.3) == 0
    task = client.get(task_id)
    assert task["state"] == "pending"
    assert task["attempts"][-1]["outcome"] in ("released", "failed")
    with running(Worker(cluster.urls, {"job": lambda p, ctx: "second run"}, wait_s=1)):
        wait_until(lambda: state_of(client, task_id) == "completed", DEADLINE_S, "the second run")
    assert client.get(task_id)["result"] == "second run"


def test_worker_rides_out_a_leader_kill(fresh_cluster):
    c = fresh_cluster
    leader = c.wait_leader()
    finished = []
    with Client(c.urls, timeout_s=30) as client:
        ids = [t["task_id"] for t in client.submit_many(
            [{"task_type": "steady", "payload": n} for n in range(80)])]

        def steady(payload, ctx):
            time.sleep(0.02)
            finished.append(payload)
            return payload
        def all_done() -> bool:
            states = [t["state"] for t in client.list(task_type="steady")]
            progress.append((round(time.monotonic(), 1), len(finished),
                             {s: states.count(s) for s in sorted(set(states))}))
            return all(s == "completed" for s in states) and len(finished) >= 80

        progress: list = []
        with running(Worker(c.urls, {"steady": steady}, lease_s=3, wait_s=1)):
            wait_until(lambda: len(finished) >= 20, DEADLINE_S, "some progress")
            c.kill(leader)
            try:
                wait_until(all_done, 120, "every task completed after the failover")
            except AssertionError:
                survivors = [i for i in c.ids if i != leader]
                raise AssertionError(f"progress (time, handled, states): {progress[::20]}; "
                                     f"status: {[c.self_status(i) for i in survivors]}; "
                                     f"logs: {[c.log(i)[-3000:] for i in survivors]}") from None
        results = sorted(client.get(i)["result"] for i in ids)
    assert results == list(range(80))
