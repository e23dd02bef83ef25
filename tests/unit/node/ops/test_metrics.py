"""Metrics from applied commands (real state machine) and the operations routes."""
from __future__ import annotations

import contextlib
import itertools
import threading

import orjson
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tsched.node.api import monitoring as api_ops
from tsched.node.services import NODE, Node
from tsched.node.api.app import error_middleware
from tsched.node.ops.attempts import AttemptTracker
from tsched.node.ops.counters import OTHER_LABEL
from tsched.node.ops.metrics import NodeMetrics
from tsched.node.ops.scrape import bounded_tenants
from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

T0 = 1_800_000_000_000     # an arbitrary epoch ms


class FakeReplica:
    """The Replica's read side over a real StateMachine; `apply` plays the Raft thread."""

    def __init__(self) -> None:
        self.sm = StateMachine()
        self._lock = threading.RLock()
        self._listeners = []
        self.self_id = "n1"
        self.leader = "n1"
        self.ready = True
        self.term = 3
        self.commit_index = 0
        self._view = type("View", (), {"last_applied": 0})()
        self.snapshot_stalls_ms = [12.0]
        self.snapshots_written = 1
        self._rids = itertools.count()

    @contextlib.contextmanager
    def read(self):
        with self._lock:
            yield self.sm

    @property
    def applied_seq(self) -> int:
        return self.sm.seq

    def leader_id(self):
        return self.leader

    def is_ready_leader(self) -> bool:
        return self.ready and self.leader == self.self_id

    def add_apply_listener(self, fn) -> None:
        self._listeners.append(fn)

    def apply(self, *cmds):
        with self._lock:
            results = self.sm.apply_batch(list(cmds))
            self.commit_index += 1
            self._view.last_applied += 1
            for fn in self._listeners:
                fn(self.sm.seq, list(cmds), results)
        return results

    def rid(self) -> str:
        return f"r{next(self._rids)}"


def submit(r: FakeReplica, task_id: str, now_ms: int, run_at_ms: int | None = None,
           tenant: str = "acme", priority: int = 5, max_retries: int = 3):
    return r.apply(c.SubmitTask(request_id=r.rid(), now_ms=now_ms, task_id=task_id,
                                tenant=tenant, task_type="t", priority=priority,
                                run_at_ms=run_at_ms, max_retries=max_retries))[0]


def claim(r: FakeReplica, now_ms: int, n: int = 10, lease_ms: int = 30_000, rid=None):
    res = r.apply(c.Claim(request_id=rid or r.rid(), now_ms=now_ms, worker_id="w",
                          task_types=("t",), max_tasks=n, lease_ms=lease_ms))[0]
    assert res.ok, res
    return list(res.value["tasks"])


def scrape(m: NodeMetrics) -> dict:
    """name -> {labels tuple: value} of every sample."""
    out: dict = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples[name][tuple(sorted(labels.items()))]


@pytest.fixture
def replica():
    return FakeReplica()


@pytest.fixture
def metrics(replica):
    m = NodeMetrics(clock_ms=lambda: T0 + 10_000)
    replica.add_apply_listener(m.attach(Node(node_id="n1", config=None, replica=replica,
                                             clock=None)))
    return m


# --- events from applied commands ---------------------------------------------------------

def test_lateness_histogram_counts_each_claimed_task(replica, metrics):
    for i in range(3):
        submit(replica, f"a{i}", T0, run_at_ms=T0)
    submit(replica, "later", T0, run_at_ms=T0 + 60_000)     # not due: not claimed
    claimed = claim(replica, T0 + 250)
    assert len(claimed) == 3
    s = scrape(metrics)
    # priority 5, claimed 250 ms late: the normal tier (4-6)
    assert value(s, "tsched_scheduling_lateness_seconds_count", tier="normal") == 3
    assert value(s, "tsched_scheduling_lateness_seconds_sum", tier="normal") == \
        pytest.approx(0.75)
    assert value(s, "tsched_scheduling_lateness_seconds_bucket", le="0.1", tier="normal") == 0
    assert value(s, "tsched_scheduling_lateness_seconds_bucket", le="0.25", tier="normal") == 3
    assert value(s, "tsched_claimed_tasks_total") == 3


def test_a_repeated_claim_answer_is_not_counted_twice(replica, metrics):
    submit(replica, "a", T0, run_at_ms=T0)
    claim(replica, T0 + 100, rid="same")
    claim(replica, T0 + 200, rid="same")        # answered from the request table
    s = scrape(metrics)
    assert value(s, "tsched_claimed_tasks_total") == 1
    assert value(s, "tsched_scheduling_lateness_seconds_count", tier="normal") == 1


def test_completions_failures_retries_and_dead_letters(replica, metrics):
    for i in range(3):
        submit(replica, f"a{i}", T0, run_at_ms=T0, max_retries=1)
    t = {task.task_id: task.fencing_token for task in claim(replica, T0 + 10)}
    complete = c.Complete(request_id="done-a0", now_ms=T0 + 20, task_id="a0",
                          fencing_token=t["a0"])
    assert replica.apply(complete)[0].ok
    again = c.Complete(request_id="done-a0-again", now_ms=T0 + 21, task_id="a0",
                       fencing_token=t["a0"])
    assert replica.apply(again)[0].ok           # idempotent: answered, not counted
    replica.apply(c.Fail(request_id=replica.rid(), now_ms=T0 + 30, task_id="a1",
                         fencing_token=t["a1"], error="boom", retryable=True))
    replica.apply(c.Fail(request_id=replica.rid(), now_ms=T0 + 40, task_id="a2",
                         fencing_token=t["a2"], error="bad input", retryable=False))
    s = scrape(metrics)
    assert value(s, "tsched_completed_tasks_total") == 1
    assert value(s, "tsched_failed_attempts_total") == 2
    assert value(s, "tsched_retried_tasks_total") == 1
    assert value(s, "tsched_dead_lettered_tasks_total") == 1
    assert value(s, "tsched_submitted_tasks_total") == 3


def test_an_expired_sessions_tasks_are_counted_when_given_back(replica, metrics):
    submit(replica, "a", T0, run_at_ms=T0)
    replica.apply(c.OpenSession(request_id=replica.rid(), now_ms=T0, worker_id="w",
                                timeout_ms=3_000))
    claim(replica, T0, lease_ms=60_000)
    replica.apply(c.EndSession(request_id=replica.rid(), now_ms=T0 + 3_500, worker_id="w",
                               expired=True))
    s = scrape(metrics)
    assert value(s, "tsched_worker_sessions_expired_total") == 1
    assert value(s, "tsched_lease_expirations_total") == 1      # at once, not in 60 s
    assert value(s, "tsched_retried_tasks_total") == 1
    assert len(metrics.attempts) == 0
    replica.apply(c.Tick(request_id=replica.rid(), now_ms=T0 + 70_000))
    assert value(scrape(metrics), "tsched_lease_expirations_total") == 1   # counted once


def test_lease_expiry_is_counted_once_by_the_tick_that_ends_it(replica, metrics):
    submit(replica, "a", T0, run_at_ms=T0, max_retries=0)
    submit(replica, "b", T0, run_at_ms=T0)
    tokens = {t.task_id: t.fencing_token for t in claim(replica, T0, lease_ms=1_000)}
    # b's heartbeat extends its lease past the tick; a's lease runs out.
    hb = c.Heartbeat(request_id=replica.rid(), now_ms=T0 + 900, task_id="b",
                     fencing_token=tokens["b"], lease_ms=5_000)
    assert replica.apply(hb)[0].ok
    replica.apply(c.Tick(request_id=replica.rid(), now_ms=T0 + 1_500))
    s = scrape(metrics)
    assert value(s, "tsched_lease_expirations_total") == 1
    assert value(s, "tsched_dead_lettered_tasks_total") == 1     # a had no retry left
    replica.apply(c.Tick(request_id=replica.rid(), now_ms=T0 + 7_000))
    s = scrape(metrics)
    assert value(s, "tsched_lease_expirations_total") == 2
    assert value(s, "tsched_retried_tasks_total") == 1           # b goes back to pending
    assert len(metrics.attempts) == 0


def test_run_duration_by_task_type_is_completed_minus_started(replica, metrics):
    submit(replica, "a", T0, run_at_ms=T0)
    (task,) = claim(replica, T0 + 100)
    replica.apply(c.Complete(request_id="done", now_ms=T0 + 2_600, task_id="a",
                             fencing_token=task.fencing_token))
    s = scrape(metrics)
    assert value(s, "tsched_task_run_seconds_count", task_type="t") == 1
    assert value(s, "tsched_task_run_seconds_sum", task_type="t") == pytest.approx(2.5)
    assert value(s, "tsched_task_run_seconds_bucket", task_type="t", le="1.0") == 0
    assert value(s, "tsched_task_run_seconds_bucket", task_type="t", le="2.5") == 1


def test_run_duration_task_types_past_the_cap_share_one_series():
    m = NodeMetrics()
    m.run_time.values_max = 2
    for task_type, seconds in (("a", 1), ("b", 2), ("c", 3), ("d", 4), ("a", 5)):
        m.run_time.observe(task_type, seconds)
    s = scrape(m)
    assert {dict(k)["task_type"] for k in s["tsched_task_run_seconds_count"]} == \
        {"a", "b", OTHER_LABEL}
    assert value(s, "tsched_task_run_seconds_count", task_type="a") == 2
    assert value(s, "tsched_task_run_seconds_sum", task_type=OTHER_LABEL) == 7


def test_per_tenant_gauges_keep_the_top_tenants_and_fold_the_rest():
    counts = {f"t{i}": {"pending": i, "running": 1} for i in range(5)}
    out = bounded_tenants(counts, lambda v: v["pending"] + v["running"],
                          lambda vs: {"pending": sum(v["pending"] for v in vs)}, limit=2)
    assert out == [("t3", counts["t3"]), ("t4", counts["t4"]), (OTHER_LABEL, {"pending": 3})]
    assert bounded_tenants({"a": 1.0}, float, max, limit=2) == [("a", 1.0)]


def test_oldest_due_age_per_tenant(replica, metrics):
    submit(replica, "old", T0 - 5_000, run_at_ms=T0 - 5_000, tenant="acme")
    submit(replica, "new", T0, run_at_ms=T0, tenant="globex")
    submit(replica, "future", T0, run_at_ms=T0 + 60_000, tenant="initech")
    s = scrape(metrics)     # the clock is T0 + 10 s
    ages = s["tsched_tenant_oldest_due_task_age_seconds"]
    assert ages == {(("tenant", "acme"),): pytest.approx(15.0),
                    (("tenant", "globex"),): pytest.approx(10.0)}


def test_paused_tasks_are_left_out_of_the_lateness_figures(replica, metrics):
    """Paused queues (issue 48): a task that waits in a pause waits on purpose."""
    submit(replica, "held", T0 - 5_000, run_at_ms=T0 - 5_000, tenant="acme")
    submit(replica, "free", T0, run_at_ms=T0, tenant="globex")
    replica.apply(c.PauseQueue(request_id=replica.rid(), now_ms=T0, tenant="acme"))
    s = scrape(metrics)     # the clock is T0 + 10 s
    assert s["tsched_tenant_oldest_due_task_age_seconds"] == {
        (("tenant", "globex"),): pytest.approx(10.0)}
    assert value(s, "tsched_oldest_claimable_task_age_seconds") == pytest.approx(10.0)
    assert [t.task_id for t in claim(replica, T0 + 100)] == ["free"]
    replica.apply(c.ResumeQueue(request_id=replica.rid(), now_ms=T0 + 60_000, tenant="acme"))
    submit(replica, "after", T0 + 60_000, run_at_ms=T0 + 60_000, tenant="acme")
    assert [t.task_id for t in claim(replica, T0 + 60_200)] == ["held", "after"]
    s = scrape(metrics)
    assert value(s, "tsched_claimed_tasks_total") == 3
    # "free" (0.1 s) and "after" (0.2 s); "held" waited in the pause: not observed
    assert value(s, "tsched_scheduling_lateness_seconds_count", tier="normal") == 2
    assert value(s, "tsched_scheduling_lateness_seconds_sum", tier="normal") == \
        pytest.approx(0.3)


def test_attempts_running_before_attach_are_tracked(replica):
    submit(replica, "a", T0, run_at_ms=T0)
    (task,) = claim(replica, T0)
    m = NodeMetrics(clock_ms=lambda: T0)
    replica.add_apply_listener(m.attach(Node("n1", None, replica, None)))
    replica.apply(c.Complete(request_id="x", now_ms=T0 + 5, task_id="a",
                             fencing_token=task.fencing_token))
    assert value(scrape(m), "tsched_completed_tasks_total") == 1


def test_attempt_tracker_forgets_attempts_of_a_replaced_state():
    class Orphan:   # still "running" long after its deadline: a snapshot replaced the state
        task_id, fencing_token, state, lease_expires_at_ms, attempts = "o", 7, "running", 10, []
    tracker = AttemptTracker()
    assert tracker.started(Orphan)
    assert not tracker.started(Orphan)
    assert tracker.expired(20) == [] and len(tracker) == 1
    assert tracker.expired(10 + AttemptTracker.ORPHAN_GRACE_MS + 1) == []
    assert len(tracker) == 0


def test_leader_changes_count_new_terms_barriers(replica, metrics):
    for rid in ("barrier:n1:3", "barrier:n1:3", "barrier:n2:5", "read-fence"):
        replica.apply(c.Barrier(request_id=rid, now_ms=T0))
    assert value(scrape(metrics), "tsched_raft_leader_changes_total") == 2


# --- scrape-time families ---------------------------------------------------------------------

FAMILIES = [
    "tsched_tasks", "tsched_pending_tasks_by_priority", "tsched_tenant_tasks",
    "tsched_oldest_claimable_task_age_seconds", "tsched_raft_term", "tsched_raft_commit_index",
    "tsched_applied_seq", "tsched_raft_has_leader", "tsched_raft_is_leader",
    "tsched_raft_leader_changes_total", "tsched_raft_snapshots_total",
    "tsched_raft_snapshot_stall_seconds_count", "tsched_waiting_claims",
    "tsched_claimed_tasks_total", "tsched_completed_tasks_total",
    "tsched_failed_attempts_total", "tsched_retried_tasks_total",
    "tsched_lease_expirations_total", "tsched_dead_lettered_tasks_total",
    "tsched_scheduling_lateness_seconds_count", "tsched_apply_latency_seconds_count",
    "tsched_tenant_oldest_due_task_age_seconds",
]


def test_scrape_has_every_family_with_queue_and_raft_values(replica, metrics):
    node = metrics._node
    node.claims = type("Hub", (), {"waiting": 4})()
    submit(replica, "old", T0 - 5_000, run_at_ms=T0 - 5_000, tenant="acme", priority=2)
    submit(replica, "new", T0, run_at_ms=T0, tenant="globex", priority=7)
    submit(replica, "future", T0, run_at_ms=T0 + 3_600_000, tenant="globex", priority=7)
    s = scrape(metrics)
    missing = [f for f in FAMILIES if f not in s]
    assert missing == []
    assert value(s, "tsched_tasks", state="pending") == 3
    assert value(s, "tsched_tasks", state="running") == 0
    assert value(s, "tsched_pending_tasks_by_priority", priority="2") == 1
    assert value(s, "tsched_pending_tasks_by_priority", priority="7") == 2
    assert value(s, "tsched_tenant_tasks", tenant="acme", state="pending") == 1
    assert value(s, "tsched_tenant_tasks", tenant="globex", state="pending") == 2
    # the clock is T0 + 10 s: "old" (due at T0 - 5 s) has waited 15 s
    assert value(s, "tsched_oldest_claimable_task_age_seconds") == pytest.approx(15.0)
    assert value(s, "tsched_raft_term") == 3
    assert value(s, "tsched_applied_seq") == 3
    assert value(s, "tsched_raft_is_leader") == 1
    assert value(s, "tsched_waiting_claims") == 4
    assert value(s, "tsched_raft_snapshot_stall_seconds_count") == 1
    assert value(s, "tsched_apply_latency_seconds_count") == 3


def test_every_app_has_its_own_registry(replica):
    a, b = NodeMetrics(), NodeMetrics()
    a.events.claimed += 1
    a.lateness.observe(0.3, 0)
    assert a.registry is not b.registry
    assert value(scrape(a), "tsched_claimed_tasks_total") == 1
    assert value(scrape(b), "tsched_claimed_tasks_total") == 0
    assert value(scrape(b), "tsched_scheduling_lateness_seconds_count", tier="critical") == 0


def test_bucket_histogram_uses_le_bounds():
    m = NodeMetrics()
    for v in (0.0, 0.001, 0.0011, 2000.0):
        m.lateness.observe(v, 10)
    s = scrape(m)
    name = "tsched_scheduling_lateness_seconds_bucket"
    assert value(s, name, le="0.001", tier="batch") == 2
    assert value(s, name, le="0.0025", tier="batch") == 3
    assert value(s, name, le="1800.0", tier="batch") == 3
    assert value(s, name, le="3600.0", tier="batch") == 4
    assert value(s, name, le="+Inf", tier="batch") == 4
    assert value(s, "tsched_scheduling_lateness_seconds_sum", tier="batch") == \
        pytest.approx(2000.0021)


# --- the routes -------------------------------------------------------------------------------

@pytest.fixture
async def client(aiohttp_client, replica):
    app = web.Application(middlewares=[error_middleware])   # the node's error shape
    app[NODE] = Node(node_id="n1", config=None, replica=replica, clock=None)
    api_ops.setup(app)
    return await aiohttp_client(app)


async def test_metrics_route_serves_the_exposition_format(client, replica):
    submit(replica, "a", T0, run_at_ms=T0)
    assert (await client.get("/healthz")).status == 200
    r = await client.get("/metrics")
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    text = await r.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["tsched_tasks"].type == "gauge"
    assert families["tsched_submitted_tasks"].type == "counter"
    assert 'route="/healthz"' in text and 'status="200"' in text
    for i, method in enumerate(("PROPFIND", "MKCOL", "TRACE")):   # no new series minted
        assert (await client.request(method, f"/nowhere/{i}")).status == 404
    text = await (await client.get("/metrics")).text()
    assert 'tsched_http_responses_total{method="other",route="unmatched",status="404"} 3.0' \
        in text
    assert "PROPFIND" not in text and "/nowhere" not in text


async def test_readyz_needs_a_leader_and_a_caught_up_replica(client, replica):
    async def ready() -> tuple[int, dict]:
        r = await client.get("/readyz")
        return r.status, await r.json()

    status, body = await ready()
    assert status == 200 and body["status"] == "ready" and body["leader"] == "n1"
    replica.leader = None
    status, body = await ready()
    assert status == 503 and body["error"]["code"] == "no_leader"
    replica.leader = "n2"
    replica.commit_index = replica._view.last_applied + api_ops.READY_LAG_ENTRIES_MAX + 1
    status, body = await ready()
    assert status == 503 and body["error"]["code"] == "unavailable"
    assert "catching up" in body["error"]["message"]
    replica.commit_index = replica._view.last_applied
    assert (await ready())[0] == 200
    replica.leader, replica.ready = "n1", False       # elected, barrier not applied yet
    assert (await ready())[0] == 503
    assert (await client.get("/healthz")).status == 200


async def test_stats_route(client, replica):
    submit(replica, "a", T0, run_at_ms=T0, tenant="acme", priority=1)
    submit(replica, "b", T0, run_at_ms=T0, tenant="globex")
    r = await client.get("/v1/stats", params={"min_seq": "2"})
    body = orjson.loads(await r.read())
    assert r.status == 200
    assert body["by_state"]["pending"] == 2
    assert body["by_priority"]["1"] == 1
    assert body["by_tenant"] == {"acme": {"pending": 1, "running": 0},
                                 "globex": {"pending": 1, "running": 0}}
    assert body["applied_seq"] == 2
    r = await client.get("/v1/stats", params={"tenant": "acme"})
    assert (await r.json())["by_tenant"] == {"acme": {"pending": 1, "running": 0}}
    r = await client.get("/v1/stats", params={"bogus": "1"})
    assert r.status == 400


async def test_dashboard_and_assets(client):
    r = await client.get("/")
    html = await r.text()
    assert r.status == 200 and r.content_type == "text/html"
    assert '<script src="/static/app.js"' in html and "/static/app.css" in html
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]
    r = await client.get("/static/app.js")
    assert r.status == 200 and r.content_type == "text/javascript"
    assert "refresh" in await r.text()
    assert (await client.get("/static/app.css")).content_type == "text/css"
    for asset in ("/static/charts.js", "/static/uPlot.iife.min.js", "/static/uPlot.min.css"):
        assert asset in html and (await client.get(asset)).status == 200, asset
    assert "MIT" in await (await client.get("/static/uPlot.LICENSE.txt")).text()
    for bad in ("/static/index.html", "/static/..%2Fmetrics.py", "/static/nope.js"):
        r = await client.get(bad)
        assert r.status == 404, bad


async def test_openapi_route(client):
    r = await client.get("/v1/openapi.json")
    assert r.status == 200
    assert (await r.json())["openapi"].startswith("3.1")


async def test_timeseries_route(client, replica):
    r = await client.get("/v1/timeseries", params={"step_s": "1"})
    body = await r.json()
    assert r.status == 200 and body["step_s"] == 1 and body["points_max"] == 3600
    assert set(body) >= {"start", "submitted", "completed", "failed", "dead_lettered",
                         "lateness_p50_ms", "lateness_p99_ms", "queue_depth",
                         "lateness_p99_ms_by_tier"}
    assert list(body["lateness_p99_ms_by_tier"]) == ["critical", "high", "normal", "low", "batch"]
    assert (await (await client.get("/v1/timeseries")).json())["step_s"] == 60
    for bad in ({"step_s": "7"}, {"step_s": "x"}, {"bogus": "1"}):
        r = await client.get("/v1/timeseries", params=bad)
        assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_argument"


def test_ended_attempts_do_not_pile_up_between_ticks(replica, metrics):
    """Tasks that finish within their leases schedule no Tick: the tracker's heap stays
    bounded by the running attempts, and the next Tick still counts an expiry."""
    now = T0
    for i in range(3_000):
        submit(replica, f"t{i}", now, run_at_ms=now)
        (task,) = claim(replica, now, n=1)
        assert replica.apply(c.Complete(request_id=replica.rid(), now_ms=now,
                                        task_id=task.task_id,
                                        fencing_token=task.fencing_token))[0].ok
        now += 1
    submit(replica, "slow", now, run_at_ms=now, max_retries=0)
    claim(replica, now, n=1, lease_ms=1_000)
    tracker = metrics.attempts
    assert len(tracker) == 1
    assert tracker.heap_entries() <= 2 * len(tracker) + AttemptTracker.HEAP_SLACK + 1
    replica.apply(c.Tick(request_id=replica.rid(), now_ms=now + 2_000))
    s = scrape(metrics)
    assert value(s, "tsched_lease_expirations_total") == 1
    assert value(s, "tsched_completed_tasks_total") == 3_000
    assert len(tracker) == 0


def test_shed_submits_are_counted_by_reason_and_tier(replica, metrics):
    """tsched_submits_shed_total{reason, tier} (DESIGN 14.2, 5.1): every series from the
    start; the state machine's sheds by the task's tier, this node's by its admission."""
    from tsched.node.api.admission import Admission
    from tsched.statemachine.errors import OVERLOADED, Result

    metrics.admission = Admission()
    s = scrape(metrics)
    for reason in ("priority", "queue_full", "busy"):
        for tier in ("critical", "high", "normal", "low", "batch"):
            assert value(s, "tsched_submits_shed_total", reason=reason, tier=tier) == 0
    assert value(s, "tsched_submits_shed_total", reason="busy", tier="unknown") == 0
    shed = Result(OVERLOADED, "shed", None, {})
    cmds = [c.SubmitTask(request_id=f"s{p}", now_ms=T0, task_id=f"s{p}", tenant="acme",
                         task_type="t", priority=p) for p in (6, 9, 8)]
    metrics.on_apply(1, cmds, [shed] * 3)
    metrics.admission.count("busy", "unknown")
    metrics.admission.count("queue_full", "high")
    s = scrape(metrics)
    assert value(s, "tsched_submits_shed_total", reason="priority", tier="low") == 2
    assert value(s, "tsched_submits_shed_total", reason="priority", tier="normal") == 1
    assert value(s, "tsched_submits_shed_total", reason="busy", tier="unknown") == 1
    assert value(s, "tsched_submits_shed_total", reason="queue_full", tier="high") == 1
