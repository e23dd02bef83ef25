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

from tsched.client import ApiError, Client, NonRetryable, Worker

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


def test_a_draining_worker_never_holds_more_unstarted_tasks_than_held_max(cluster, client):
    """A Worker of 4 fast slots over a backlog widens its window at once and keeps several
    claims open, but the tasks leased to it and not started (in claims on their way, or
    handed to a busy handler) never exceed `held_max`; each task runs once."""
    task_type, count, held_max = "window-bound", 1500, 120
    for _ in range(count // 500):
        client.submit_many([{"task_type": task_type}] * 500, minimal=True)
    ran: list[str] = []
    unstarted: list[int] = []

    def noop(payload, ctx):
        ran.append(ctx.task_id)
        # The claims' reservation (tasks asked for, not yet here) and the tasks here whose
        # handler has not started: an upper bound of what is leased to it and unstarted.
        jobs = list(worker._jobs.values())
        unstarted.append(worker._reserved + sum(not job.started for job, _ in jobs))
    worker = Worker(cluster.urls, {task_type: noop}, concurrency=4, wait_s=1,
                    held_max=held_max)
    with running(worker):
        wait_until(lambda: len(ran) >= count and worker.running == 0, DEADLINE_S,
                   "the backlog drained and reported")
    assert len(ran) == len(set(ran)) == count
    assert max(unstarted) <= held_max
    assert max(unstarted) > 4 * 4     # beyond concurrency + claim_ahead: the window widened


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
        worker = Worker(c.urls, {"steady": steady}, lease_s=3, wait_s=1)
        with running(worker):
            wait_until(lambda: len(finished) >= 20, DEADLINE_S, "some progress")
            opened = wait_until(lambda: session_of(client, worker.worker_id),
                                DEADLINE_S, "the worker's session")["opened_at"]
            c.kill(leader)
            try:
                wait_until(all_done, 120, "every task completed after the failover")
            except AssertionError:
                survivors = [i for i in c.ids if i != leader]
                raise AssertionError(f"progress (time, handled, states): {progress[::20]}; "
                                     f"status: {[c.self_status(i) for i in survivors]}; "
                                     f"logs: {[c.log(i)[-3000:] for i in survivors]}") from None
            # the new leader gave the live worker's session a fresh timeout: not expired
            kept = session_of(client, worker.worker_id)
            assert kept is not None and kept["opened_at"] == opened, kept
        results = sorted(client.get(i)["result"] for i in ids)
        errors = {a["error"] for i in ids for a in client.get(i)["attempts"]}
    assert results == list(range(80))
    assert "worker session expired" not in errors


# --- OpenTelemetry (the `otel` extra, client/otel.py; DESIGN 12) ------------------------------

@pytest.fixture(scope="module")
def spans():
    """Every span of this process, kept in memory by the SDK (one global provider per
    process: another test's is reused)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def _process_spans(spans, task_id: str) -> list:
    return sorted((s for s in spans.get_finished_spans()
                   if (s.attributes or {}).get("messaging.message.id") == task_id),
                  key=lambda s: s.attributes["tsched.task.attempt"])


def test_each_attempt_runs_in_a_consumer_span_child_of_the_submitters(cluster, client, spans):
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, StatusCode

    def once_broken(payload, ctx):
        if ctx.attempt == 1:
            raise ValueError("broken once")
        return {"n": payload["n"]}
    with trace.get_tracer("producer").start_as_current_span("submit traced") as submit:
        task = client.submit("traced", {"n": 1}, tenant="acme", max_retries=1,
                             retry=FAST_RETRY)
    parent = submit.get_span_context()
    assert task["traceparent"] == (f"00-{parent.trace_id:032x}-{parent.span_id:016x}-"
                                   f"{int(parent.trace_flags):02x}")
    with running(Worker(cluster.urls, {"traced": once_broken}, wait_s=1,
                        worker_id="otel-w")):
        wait_until(lambda: state_of(client, task["task_id"]) == "completed", DEADLINE_S,
                   "completed on its second attempt")
        wait_until(lambda: len(_process_spans(spans, task["task_id"])) == 2, DEADLINE_S,
                   "both attempts' spans ended")
    first, second = _process_spans(spans, task["task_id"])
    for span, attempt in ((first, 1), (second, 2)):
        assert span.name == "process traced" and span.kind == SpanKind.CONSUMER
        assert span.context.trace_id == parent.trace_id      # a retry: the same trace
        assert span.parent is not None and span.parent.span_id == parent.span_id
        assert span.parent.is_remote
        assert dict(span.attributes) == {
            "messaging.system": "tsched", "messaging.operation.type": "process",
            "messaging.operation.name": "process", "messaging.destination.name": "traced",
            "messaging.message.id": task["task_id"], "tsched.task.attempt": attempt,
            "tsched.tenant": "acme", "messaging.client.id": "otel-w"}
    assert first.status.status_code == StatusCode.ERROR
    assert first.events[0].name == "exception"
    assert second.status.status_code != StatusCode.ERROR


def test_a_workflows_steps_run_in_the_submitters_trace_linked_to_their_parents(
        cluster, client, spans):
    """Each step has a `create` span, child of the submitter's and linked to its parent
    steps' (the graph); its `process` span is a child of its `create` span."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    steps = [{"name": "b", "task_type": "wf_traced", "deps": ["a"]},   # a parent listed later
             {"name": "a", "task_type": "wf_traced"},
             {"name": "c", "task_type": "wf_traced", "deps": ["a", "b"]}]
    with trace.get_tracer("producer").start_as_current_span("submit workflow") as submit:
        wf = client.submit_workflow(steps)
    assert "traceparent" not in steps[0]          # the caller's dicts are left alone
    parent = submit.get_span_context()
    ids = {s["name"]: s["task_id"] for s in wf["steps"]}
    with running(Worker(cluster.urls, {"wf_traced": lambda payload, ctx: None}, wait_s=1)):
        wait_until(lambda: all(len(_process_spans(spans, i)) == 1 for i in ids.values()),
                   DEADLINE_S, "every step's span")
    creates = {s.attributes["tsched.step"]: s for s in spans.get_finished_spans()
               if s.name == "create wf_traced" and s.context.trace_id == parent.trace_id}
    assert sorted(creates) == ["a", "b", "c"]
    for name, task_id in ids.items():
        create, (process,) = creates[name], _process_spans(spans, task_id)
        assert create.kind == SpanKind.PRODUCER and create.parent.span_id == parent.span_id
        assert process.context.trace_id == parent.trace_id
        assert process.parent.span_id == create.context.span_id
        assert client.get(task_id)["traceparent"].split("-")[2] == \
            f"{create.context.span_id:016x}"
    linked = {n: sorted(link.context.span_id for link in creates[n].links) for n in creates}
    assert linked == {"a": [], "b": [creates["a"].context.span_id],
                      "c": sorted([creates["a"].context.span_id,
                                   creates["b"].context.span_id])}


def test_a_task_submitted_outside_any_span_has_none(cluster, client):
    assert client.submit("untraced")["traceparent"] is None


# --- worker sessions (DESIGN 9): a dead or cut-off worker's tasks back in seconds ---------

SESSION_LEASE_S = 60   # every wait below is bounded well under it: no lease ever expires
SESSION_WORKER = """
import os, sys, time, pathlib
from tsched.client import Worker
urls, log, worker_id, timeout_s, hold = sys.argv[1:6]
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def run(payload, ctx):
    os.write(fd, f"{ctx.task_id} {ctx.fencing_token}\\n".encode())   # one write: whole lines
    if hold == "hold":   # until the test lets this task go
        while not pathlib.Path(log + "." + ctx.task_id).exists():
            time.sleep(0.01)
    else:
        time.sleep(0.01)
    return {"token": ctx.fencing_token}
Worker(urls, {"sess": run}, worker_id=worker_id, lease_s=%d, wait_s=1,
       session_timeout_s=float(timeout_s)).run()
""" % SESSION_LEASE_S


def started(log) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    return [(i, int(tok)) for i, tok in (line.split() for line in log.read_text().splitlines())]


def session_of(client: Client, worker_id: str) -> dict | None:
    """The worker's session as the leader sees it (`silent_s` is known there only)."""
    found = [s for s in client.sessions(consistency="linearizable")
             if s["worker_id"] == worker_id]
    return found[0] if found else None


def session_worker(cluster, log, worker_id: str, timeout_s: float, hold: str,
                   client: Client) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SESSION_WORKER, ",".join(cluster.urls),
                             str(log), worker_id, str(timeout_s), hold], start_new_session=True)
    wait_until(lambda: session_of(client, worker_id), DEADLINE_S, "the worker's session")
    return proc


def ended(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_a_killed_workers_tasks_come_back_long_before_their_lease(cluster, client, tmp_path):
    """Issue 48, small: worker A is SIGKILLed with tasks leased for 60 s; every task is
    done by worker B within a deadline well under the lease, A's unfinished attempts were
    cut short by its session (or released, for claims it never received), and only tasks
    A had started and not reported ran twice."""
    log_a = tmp_path / "a.log"
    proc = session_worker(cluster, log_a, "sess-a", 2, "run", client)
    try:
        ids = [t["task_id"] for t in client.submit_many(
            [{"task_type": "sess", "payload": n} for n in range(200)], minimal=True)]
        wait_until(lambda: len(started(log_a)) >= 60, DEADLINE_S, "A to run 30% of them")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        ended(proc)
    ran_b: list[str] = []
    survivor = Worker(cluster.urls, {"sess": lambda p, ctx: ran_b.append(ctx.task_id)},
                      worker_id="sess-b", lease_s=SESSION_LEASE_S, wait_s=1)
    with running(survivor):
        wait_until(lambda: all(t["state"] == "completed"
                               for t in client.list(task_type="sess", limit=1000)
                               if t["task_id"] in set(ids)),
                   SESSION_LEASE_S / 2, "every task done, long before a lease could expire")
    tasks = {i: client.get(i) for i in ids}
    cut = {i: a for i, t in tasks.items() for a in t["attempts"]
           if a["worker_id"] == "sess-a" and a["outcome"] != "completed"}
    assert cut and any(a["error"] == "worker session expired" for a in cut.values())
    for a in cut.values():
        assert a["outcome"] == "released" or (a["outcome"], a["error"]) == (
            "lease_expired", "worker session expired"), a
    twice = {i for i, _ in started(log_a)} & set(ran_b)
    assert twice <= set(cut)   # ran twice: only what A ran and never reported


def outcomes(task: dict) -> list[str]:
    """A task's attempts' outcomes, leaving out claims released undelivered."""
    return [a["outcome"] for a in task["attempts"] if a["outcome"] != "released"]


def test_a_cut_off_worker_keeps_its_tasks_within_its_timeout_and_loses_them_after(
        cluster, client, tmp_path):
    """A worker stopped with SIGSTOP (its connections stay open, it says nothing): cut off
    for less than its session timeout it keeps its task; cut off for longer, the task is
    given back (well before its 60 s lease) and its late reports are refused (409)."""
    log = tmp_path / "c.log"
    proc = session_worker(cluster, log, "sess-c", 4, "hold", client)
    try:
        short = client.submit("sess")["task_id"]
        wait_until(lambda: started(log), DEADLINE_S, "the first task to start")
        first_token = started(log)[0][1]
        opened = session_of(client, "sess-c")["opened_at"]
        os.killpg(proc.pid, signal.SIGSTOP)
        wait_until(lambda: (session_of(client, "sess-c") or {}).get("silent_s", 0) >= 1.0,
                   DEADLINE_S, "the leader to miss the worker for 1 s of its 4")
        os.killpg(proc.pid, signal.SIGCONT)
        (tmp_path / f"c.log.{short}").touch()
        wait_until(lambda: state_of(client, short) == "completed", DEADLINE_S, "its report")
        task = client.get(short)
        assert task["result"] == {"token": first_token}
        # never given back (a claim answer the worker's client had given up on may have
        # been released before it: not the session's doing)
        assert outcomes(task) == ["completed"], task["attempts"]
        assert session_of(client, "sess-c")["opened_at"] == opened   # the same session

        long = client.submit("sess")["task_id"]
        wait_until(lambda: len(started(log)) == 2, DEADLINE_S, "the second task to start")
        cut_token = started(log)[1][1]
        os.killpg(proc.pid, signal.SIGSTOP)
        # read at the leader: a follower may not have applied the claim yet (pending too)
        wait_until(lambda: client.get(long, consistency="linearizable")["state"] == "pending",
                   SESSION_LEASE_S / 2, "the task given back, long before its lease expires")
        given = client.get(long, consistency="linearizable")["attempts"][-1]
        assert (given["outcome"], given["error"]) == ("lease_expired", "worker session expired")
        with pytest.raises(ApiError) as late:   # the report the cut-off worker would send
            client.complete(long, cut_token, {"token": cut_token})
        assert late.value.code == "stale_token" and late.value.status == 409
        os.killpg(proc.pid, signal.SIGCONT)
        (tmp_path / f"c.log.{long}").touch()   # its handler returns: its report is refused
        wait_until(lambda: state_of(client, long) == "completed", DEADLINE_S, "the re-run")
        task = client.get(long)
        assert task["result"]["token"] > cut_token     # not the cut-off run's report
        assert outcomes(task) == ["lease_expired", "completed"], task["attempts"]
        assert session_of(client, "sess-c")["opened_at"] != opened   # opened anew
    finally:
        ended(proc)
