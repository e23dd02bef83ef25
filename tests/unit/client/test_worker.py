"""Worker runtime against an in-memory fake node: results, failures, early dispatch,
cancellation through heartbeats, lost leases, graceful stop."""
from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time

import pytest

from tests.harness.waits import wait_until
from tsched.client import NonRetryable, Worker

try:
    from client_support import FakeNode, error
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, error

DEADLINE_S = 10.0


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat().replace("+00:00", "Z")


class FakeScheduler:
    """Just enough of the worker endpoints: claims (long-poll), heartbeats, completions."""

    def __init__(self, node: FakeNode, release: bool = True) -> None:
        self.node, self.tasks, self.token = node, {}, 0
        self.reports: list[dict] = []
        self.claimed_max: list[int] = []      # max_tasks of every claim
        self.claims_open = self.claims_open_max = 0
        self.refuse_completions = False       # as a node that predates them on claims
        self.refuse_slots = False             # likewise for slot reports (DESIGN 14.4)
        self.slots: list[dict] = []           # the slot reports of claims and heartbeats
        self.claim_delay_s = 0.0              # a round trip's worth of commit time
        self.released: list[str] = []
        self.heartbeat_override: dict[str, tuple] = {}   # task_id -> error answer
        node.route("POST", "/v1/claims", self.claims)
        node.route("POST", "/v1/heartbeats", self.heartbeats)
        node.route("POST", "/v1/completions", self.completions)
        self.release_supported = release

    def add(self, task_id: str, task_type: str = "t", payload=None, run_at: float | None = None):
        self.tasks[task_id] = {"task_id": task_id, "task_type": task_type, "payload": payload,
                               "state": "pending", "run_at": iso(run_at or time.time()),
                               "attempt": 0, "cancel_requested": False}
        self._route_actions(task_id)

    def _route_actions(self, task_id: str) -> None:
        def release(req):
            if self.release_supported:
                self.released.append(task_id)
                self.tasks[task_id]["state"] = "pending"
                return 200, self.tasks[task_id]
            return error("not_found", "no route", 404)

        def fail(req):
            self.reports.append({"task_id": task_id, **req.body, "via": "fail"})
            return 200, self.tasks[task_id]
        self.node.route("POST", f"/v1/tasks/{task_id}/release", release)
        self.node.route("POST", f"/v1/tasks/{task_id}/fail", fail)

    async def claims(self, req):
        if "completions" in req.body and self.refuse_completions:
            return 400, {"error": {"code": "invalid_argument", "message": "unknown field",
                                   "details": {"fields": ["completions"]}}}
        if "slots" in req.body:
            if self.refuse_slots:
                return _unknown_slots()
            self.slots.append(req.body["slots"])
        done = [self._complete(item, "claim") for item in req.body.get("completions", [])]
        self.claimed_max.append(req.body["max_tasks"])
        self.claims_open += 1
        self.claims_open_max = max(self.claims_open, self.claims_open_max)
        try:
            if self.claim_delay_s:
                await asyncio.sleep(self.claim_delay_s)   # the fake's stand-in for a commit
            tasks = await self._claim(req)
        finally:
            self.claims_open -= 1
        answer = {"tasks": tasks, "applied_seq": 1}
        if "completions" in req.body:
            answer["completions"] = done
        return 200, answer

    async def _claim(self, req):
        until = time.monotonic() + req.body["wait_s"]
        while True:
            ready = [t for t in self.tasks.values()
                     if t["state"] == "pending" and t["task_type"] in req.body["task_types"]]
            if ready or time.monotonic() >= until:
                break
            await asyncio.sleep(0.01)   # the fake's own long-poll loop
        out = []
        for t in ready[:req.body["max_tasks"]]:
            self.token += 1
            t.update(state="running", fencing_token=self.token, attempt=t["attempt"] + 1,
                     execution_id="x-" + t["task_id"],
                     lease_expires_at=iso(time.time() + req.body["lease_s"]))
            out.append(dict(t))
        return out

    def heartbeats(self, req):
        if "slots" in req.body:
            if self.refuse_slots:
                return _unknown_slots()
            self.slots.append(req.body["slots"])
        results = []
        for item in req.body["heartbeats"]:
            t = self.tasks[item["task_id"]]
            if item["task_id"] in self.heartbeat_override:
                results.append(self.heartbeat_override[item["task_id"]])
            elif item["fencing_token"] != t["fencing_token"]:
                results.append(error("stale_token")[1])
            else:
                results.append({"lease_expires_at": iso(time.time() + item["lease_s"]),
                                "cancel_requested": t["cancel_requested"]})
        return 200, {"results": results, "applied_seq": 1}

    def completions(self, req):
        results = [self._complete(item, "batch") for item in req.body["completions"]]
        return 200, {"results": results, "applied_seq": 2}

    def _complete(self, item: dict, via: str) -> dict:
        self.reports.append({**item, "via": via})
        self.tasks[item["task_id"]]["state"] = "done"
        return dict(self.tasks[item["task_id"]])

    def report(self, task_id: str) -> dict | None:
        found = [r for r in self.reports if r["task_id"] == task_id]
        return found[-1] if found else None


def _unknown_slots():
    return 400, {"error": {"code": "invalid_argument", "message": "unknown field",
                           "details": {"fields": ["slots"]}}}


def wait_for(cond, what: str) -> None:
    wait_until(cond, DEADLINE_S, what)


@pytest.fixture
def fake():
    node = FakeNode()
    yield FakeScheduler(node)
    node.close()


class Running:
    """A worker on a background thread, stopped and joined at exit."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        return self.worker

    def __exit__(self, *exc) -> None:
        self.worker.stop()
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "worker did not stop"


def make(fake, handlers, **kw) -> Worker:
    kw.setdefault("wait_s", 0.2)
    kw.setdefault("grace_s", 2.0)
    return Worker(fake.node.url, handlers, **kw)


def test_results_and_context_reach_the_cluster(fake):
    seen = {}

    def handler(payload, ctx):
        seen[ctx.task_id] = (ctx.execution_id, ctx.fencing_token, ctx.attempt,
                             threading.current_thread().name)
        return {"double": payload * 2}
    for i in range(6):
        fake.add(f"k{i}", payload=i)
    with Running(make(fake, {"t": handler}, concurrency=2)):
        wait_for(lambda: len(fake.reports) == 6, "six reports")
    for i in range(6):
        r = fake.report(f"k{i}")
        assert r["result"] == {"double": 2 * i}
        assert r["fencing_token"] == fake.tasks[f"k{i}"]["fencing_token"]
        assert seen[f"k{i}"][:3] == (f"x-k{i}", r["fencing_token"], 1)
        assert seen[f"k{i}"][3].startswith("tsched-handler")   # sync handlers run in the pool


def test_exceptions_are_retryable_and_nonretryable_is_not(fake):
    def boom(payload, ctx):
        raise ValueError("bad input " + "x" * 10_000)

    def stop(payload, ctx):
        raise NonRetryable("never again")

    def unserialisable(payload, ctx):
        return {1, 2}
    fake.add("a", "boom")
    fake.add("b", "stop")
    fake.add("c", "set")
    with Running(make(fake, {"boom": boom, "stop": stop, "set": unserialisable})):
        wait_for(lambda: len(fake.reports) == 3, "three reports")
    a, b, c = fake.report("a"), fake.report("b"), fake.report("c")
    err = a["error"]
    assert a["retryable"] is True and err["type"] == "ValueError" and "result" not in a
    assert err["message"].startswith("bad input") and len(err["message"]) == 2048
    # the traceback keeps its last characters: here the tail of the long message line
    assert len(err["traceback"]) == 4096 and err["traceback"].endswith("xxx\n")
    assert b["retryable"] is False and b["error"]["message"] == "never again"
    assert b["error"]["type"] == "NonRetryable"
    assert b["error"]["traceback"].startswith("Traceback (most recent call last)")
    assert 'raise NonRetryable("never again")' in b["error"]["traceback"]
    assert c["retryable"] is False and "JSON" in c["error"]


class Unreachable(ConnectionError):
    pass


def test_retry_on_and_no_retry_on_pick_retryable_by_class_name(fake):
    def raise_(exc):
        def handler(payload, ctx):
            raise exc
        return handler
    handlers = {"net": raise_(Unreachable("partner bank down")), "bad": raise_(KeyError("x")),
                "only": raise_(ValueError("not listed")), "any": raise_(KeyError("y"))}
    for tid, ttype in (("n", "net"), ("b", "bad"), ("o", "only"), ("a", "any")):
        fake.add(tid, ttype)
    retry_on = {"net": ["ConnectionError"], "only": ["TimeoutError"]}
    no_retry_on = {"bad": ["LookupError"], "net": ["ValueError"]}
    with Running(make(fake, handlers, retry_on=retry_on, no_retry_on=no_retry_on)):
        wait_for(lambda: len(fake.reports) == 4, "four reports")
    assert fake.report("n")["retryable"] is True      # a base class's name matches
    assert fake.report("b")["retryable"] is False     # KeyError is a LookupError
    assert fake.report("o")["retryable"] is False     # retry_on given, not listed
    assert fake.report("a")["retryable"] is True      # no rule: every exception retried
    assert fake.report("n")["error"]["type"] == "Unreachable"


def test_retry_rules_must_name_handled_task_types(fake):
    with pytest.raises(ValueError, match="without a handler"):
        make(fake, {"t": print}, retry_on={"other": ["ValueError"]})
    with pytest.raises(ValueError, match="lists of class names"):
        make(fake, {"t": print}, no_retry_on={"t": "ValueError"})


def test_async_handlers_run_on_the_loop(fake):
    async def handler(payload, ctx):
        await asyncio.sleep(0)
        return threading.current_thread().name
    fake.add("a")
    with Running(make(fake, {"t": handler})):
        wait_for(lambda: fake.report("a"), "a report")
    assert not fake.report("a")["result"].startswith("tsched-handler")


def test_early_dispatched_task_starts_at_run_at_by_the_local_clock(fake):
    started = {}
    run_at = time.time() + 0.5
    fake.add("later", run_at=run_at)
    with Running(make(fake, {"t": lambda p, ctx: started.setdefault("at", time.time())},
                      prefetch_ms=1000)):
        wait_for(lambda: fake.tasks["later"]["state"] != "pending", "the claim")
        assert "at" not in started   # claimed before its time, not yet started
        wait_for(lambda: fake.report("later"), "the report")
    # the fake hands the time out at ms precision; the handler must not start before it
    assert started["at"] >= run_at - 0.002


def test_cancel_request_reaches_the_handler_through_heartbeat(fake):
    outcome = {}

    def handler(payload, ctx):
        outcome["seen"] = ctx.cancelled.wait(DEADLINE_S)
        return "stopped early"
    fake.add("a")
    with Running(make(fake, {"t": handler}, lease_s=0.6)):
        wait_for(lambda: fake.tasks["a"]["state"] == "running", "the claim")
        fake.tasks["a"]["cancel_requested"] = True
        wait_for(lambda: fake.report("a"), "the report")
    assert outcome["seen"] is True
    assert fake.report("a")["result"] == "stopped early"


def test_lost_lease_sets_cancelled_and_drops_the_late_result(fake):
    done = threading.Event()

    def handler(payload, ctx):
        ctx.cancelled.wait(DEADLINE_S)
        done.set()
        return "late"
    fake.add("a")
    fake.heartbeat_override["a"] = error("stale_token")[1]
    with Running(make(fake, {"t": handler}, lease_s=0.6)) as w:
        assert done.wait(DEADLINE_S)
        wait_for(lambda: w.running == 0, "the job to end")
    assert fake.report("a") is None


@pytest.mark.parametrize("release", [True, False])
def test_stop_releases_what_outlives_the_grace_period(release):
    node = FakeNode()
    fake = FakeScheduler(node, release=release)
    try:
        seen = threading.Event()

        def handler(payload, ctx):
            seen.set()
            ctx.cancelled.wait(DEADLINE_S)
            return "too late"
        fake.add("slow")
        fake.add("waiting", run_at=time.time() + 30)   # early-dispatched, never started
        w = make(fake, {"t": handler}, grace_s=0.2, prefetch_ms=1000, concurrency=2)
        r = Running(w)
        with r:
            assert seen.wait(DEADLINE_S)
            wait_for(lambda: fake.tasks["waiting"]["state"] == "running", "both claims")
        if release:
            assert sorted(fake.released) == ["slow", "waiting"]
            assert fake.reports == []
        else:   # no release call on this node: failed as retryable instead
            assert sorted(r["task_id"] for r in fake.reports) == ["slow", "waiting"]
            assert all(r["via"] == "fail" and r["retryable"] for r in fake.reports)
    finally:
        node.close()


def test_stop_lets_running_handlers_finish_within_grace(fake):
    gate, began = threading.Event(), threading.Event()

    def handler(payload, ctx):
        began.set()
        gate.wait(DEADLINE_S)
        return "finished"
    fake.add("a")
    w = make(fake, {"t": handler}, grace_s=DEADLINE_S)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    assert began.wait(DEADLINE_S)   # started: stopping now must let it finish
    w.stop()
    gate.set()
    t.join(DEADLINE_S)
    assert not t.is_alive()
    assert fake.report("a")["result"] == "finished" and fake.released == []


def test_constructor_checks_its_arguments():
    for bad in ({"handlers": {}}, {"concurrency": 0}, {"lease_s": 0}, {"prefetch_ms": 2000}):
        args = {"handlers": {"t": print}, **bad}
        with pytest.raises(ValueError):
            Worker("http://127.0.0.1:1", **args)


def test_a_second_stop_skips_the_grace_period(fake):
    began = threading.Event()

    def handler(payload, ctx):
        began.set()
        ctx.cancelled.wait(DEADLINE_S)
        return "too late"
    fake.add("a")
    w = make(fake, {"t": handler}, grace_s=3600)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    assert began.wait(DEADLINE_S)
    w.stop()
    w.stop()   # a second Ctrl-C: do not wait an hour
    t.join(DEADLINE_S)
    assert not t.is_alive()
    assert fake.released == ["a"] and fake.reports == []


# --- keeping the pipe full ----------------------------------------------------------------

def reported_via(fake, n: int, **worker_kw) -> list[str]:
    """Runs n quick tasks; how each outcome reached the fake ("claim" or "batch")."""
    for i in range(n):
        fake.add(f"q{i}")
    with Running(make(fake, {"t": lambda p, ctx: "ok"}, **worker_kw)):
        wait_for(lambda: len(fake.reports) == n, f"{n} reports")
        return [r["via"] for r in fake.reports]   # before a stop resends any in flight


def test_completions_ride_on_the_next_claim(fake):
    vias = reported_via(fake, 6, concurrency=1, claim_ahead=0, held_max=1)
    # Each claim comes back full (window 1): from the second task on, a completion waits
    # up to 5 ms for the next claim, which goes out as soon as the handler returns (a busy
    # machine can make it miss that now and then).
    assert vias.count("claim") >= 3 and set(vias) <= {"claim", "batch"}


def test_under_a_trickle_completions_go_apart_and_two_claims_stay_open(fake):
    """Claims that come back short (less work than asked for) carry nothing."""
    vias = reported_via(fake, 5, concurrency=4, claim_ahead=4)
    assert vias == ["batch"] * 5 and fake.claims_open_max <= 2


def test_a_node_without_completions_on_claims_gets_them_apart(fake):
    fake.refuse_completions = True
    for i in range(4):
        fake.add(f"o{i}")
    with Running(make(fake, {"t": lambda p, ctx: "ok"}, concurrency=1, claim_ahead=0)):
        wait_for(lambda: len(fake.reports) == 4, "four reports")
    assert {r["via"] for r in fake.reports} == {"batch"}
    assert sorted(r["task_id"] for r in fake.reports) == [f"o{i}" for i in range(4)]


def test_claims_and_heartbeats_report_the_slots_and_progress_goes_out(fake):
    started, release = threading.Event(), threading.Event()

    def slow(payload, ctx):
        ctx.progress(0.5, "half")
        started.set()
        release.wait(DEADLINE_S)
    fake.add("s1")
    progress: list[dict] = []
    plain = fake.heartbeats

    def heartbeats(req):
        progress.extend(i["progress"] for i in req.body["heartbeats"] if "progress" in i)
        return plain(req)
    fake.node.route("POST", "/v1/heartbeats", heartbeats)
    with Running(make(fake, {"t": slow}, concurrency=2, lease_s=3, worker_id="w9")):
        wait_for(started.is_set, "the handler started")
        wait_for(lambda: {"fraction": 0.5, "message": "half"} in progress, "the progress")
        wait_for(lambda: any(s.get("busy") == {"t": 1} and s.get("worker_id") == "w9"
                             for s in fake.slots), "a heartbeat's report of one busy slot")
        release.set()
    assert {"total": 2, "busy": {}} in fake.slots   # the first claim's


def test_a_node_without_slot_reports_gets_claims_and_heartbeats_without_them(fake):
    fake.refuse_slots = True
    started, release = threading.Event(), threading.Event()

    def slow(payload, ctx):
        started.set()
        release.wait(DEADLINE_S)
        return "ok"
    fake.add("n1")
    sent: list[dict] = []
    plain = fake.heartbeats

    def heartbeats(req):
        sent.append(req.body)
        return plain(req)
    fake.node.route("POST", "/v1/heartbeats", heartbeats)
    with Running(make(fake, {"t": slow}, concurrency=1, lease_s=3)):
        wait_for(started.is_set, "the task claimed without a slot report")
        wait_for(lambda: any("slots" not in b for b in sent), "a heartbeat without the report")
        release.set()
        wait_for(lambda: fake.report("n1") is not None, "the report")
    assert fake.slots == []


def test_fast_handlers_widen_the_window_and_overlap_claims(fake):
    fake.claim_delay_s = 0.03
    for i in range(3000):
        fake.add(f"f{i:04d}")
    worker = make(fake, {"t": lambda p, ctx: None}, concurrency=2, claim_ahead=2,
                  held_max=400)
    with Running(worker):
        wait_for(lambda: len(fake.reports) == 3000, "every task reported")
    floor = 2 + 2
    assert max(fake.claimed_max) > floor          # claimed beyond today's window
    assert max(fake.claimed_max) <= 100           # never beyond the API's bound
    assert fake.claims_open_max > 2               # more than two claims overlapped


def test_slow_handlers_keep_a_small_window(fake):
    for i in range(12):
        fake.add(f"s{i:02d}")
    held = []

    def slow(payload, ctx):
        held.append(worker._held)   # claimed and not returned (not: being reported)
        time.sleep(0.2)

    worker = make(fake, {"t": slow}, concurrency=2, claim_ahead=2)
    with Running(worker):
        wait_for(lambda: len(fake.reports) == 12, "every task reported")
    assert max(fake.claimed_max) <= 4 and max(held) <= 4   # concurrency + claim_ahead
    assert fake.claims_open_max <= 2


def test_rate_limited_is_reported_apart_and_a_refused_one_becomes_a_failure(fake):
    """RateLimited goes to /rate-limited (no completion, no attempt used up); when the
    cluster refuses it (the task names no such limit) the task is failed, retryably,
    rather than left running to its lease's end."""
    from tsched.client import RateLimited
    seen: list[dict] = []

    def rate_limited(req):
        seen.append({"task_id": req.path.split("/")[3], **req.body})
        if req.body["limit"] != "partner":
            return error("invalid_argument", "the task names no such limit", 400)
        return 200, {"task_id": "a", "state": "pending", "attempt": 0}
    for task_id in ("a", "b"):
        fake.node.route("POST", f"/v1/tasks/{task_id}/rate-limited", rate_limited)
        fake.add(task_id, "call", payload=task_id)

    def call(payload, ctx):
        raise RateLimited("partner" if payload == "a" else "other", after_s=30)
    with Running(make(fake, {"call": call})):
        wait_for(lambda: len(seen) == 2 and fake.report("b") is not None,
                 "both reports and b's failure")
    by_task = {s["task_id"]: s for s in seen}
    assert by_task["a"]["limit"] == "partner" and by_task["a"]["after_s"] == 30
    assert by_task["a"]["fencing_token"] == fake.tasks["a"]["fencing_token"]
    assert fake.report("a") is None                    # no completion, no failure
    b = fake.report("b")
    assert b["retryable"] is True and b["error"]["type"] == "RateLimited"
