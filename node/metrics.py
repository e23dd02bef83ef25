"""Prometheus metrics of one node (DESIGN.md section 12), in a registry of its own per app.

Three sources, each as cheap as it can be:

- queue gauges (tasks by state / priority / tenant, the oldest claimable task's age) and
  Raft gauges are computed when Prometheus scrapes, from `sm.stats()` and the Replica's
  properties, so nothing is maintained for them between scrapes;
- event counters (claims, completions, failures, retries, lease expirations, dead letters)
  and the lateness histogram come from applied commands' results through the Replica's
  apply listener: a type check per command, and work only for the commands that count;
- request durations come from an aiohttp middleware.

Every replica applies the same commands, so every node reports the same event counts;
dashboards should take `max` across nodes (or the leader's series), never `sum`.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tsched.statemachine import commands as c

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATES = ("pending", "running", "completed", "cancelled", "dead_letter")
PRIORITIES = tuple(range(11))

# Lateness of a claimed task: early dispatch aims at a few ms, plain claims at tens of ms,
# and a backlog shows up in seconds to minutes.
LATENESS_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                      10.0, 30.0, 60.0, 300.0, 1800.0)
# Propose -> apply: one group commit is a few ms; seconds mean elections or overload.
APPLY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.04, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)
REQUEST_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                     5.0, 10.0, 30.0, 60.0)
SNAPSHOT_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class QueueView:
    """`sm.stats()` in the shape metrics and the dashboard use."""

    by_state: dict[str, int] = field(default_factory=dict)
    by_priority: dict[int, int] = field(default_factory=dict)       # pending tasks
    by_tenant: dict[str, dict[str, int]] = field(default_factory=dict)
    oldest_claimable_age_s: float | None = None                     # None: nothing claimable


def queue_view(stats: dict, now_ms: int) -> QueueView:
    """Normalise the state machine's counts; missing parts read as empty."""
    by_state = {s: int((stats.get("by_state") or {}).get(s, 0)) for s in STATES}
    by_priority = {int(p): int(n) for p, n in (stats.get("pending_by_priority")
                                               or stats.get("by_priority") or {}).items()}
    by_tenant = {str(t): {s: int(n) for s, n in counts.items()}
                 for t, counts in (stats.get("by_tenant") or {}).items()}
    oldest = stats.get("oldest_pending_run_at_ms")
    age = None
    if oldest is not None and oldest <= now_ms:
        age = (now_ms - oldest) / 1000
    return QueueView(by_state, by_priority, by_tenant, age)


class NodeMetrics:
    """The metrics of one node. `bind(node)` connects the scrape-time sources."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._node: Any = None
        self._lock = threading.Lock()          # guards the leader-change tracking
        self._leader_term = -1
        self._snapshots_seen = 0
        r = self.registry
        self.claimed = Counter("tsched_claimed_tasks_total", "Tasks handed to workers by claims",
                               registry=r)
        self.completed = Counter("tsched_completed_tasks_total", "Tasks completed", registry=r)
        self.failed = Counter("tsched_failed_attempts_total",
                              "Attempts reported failed by workers", registry=r)
        self.retried = Counter("tsched_retried_tasks_total",
                               "Failed or expired attempts that went back to pending", registry=r)
        self.expired = Counter("tsched_lease_expirations_total",
                               "Leases that ran out (or tasks that timed out) while running",
                               registry=r)
        self.dead = Counter("tsched_dead_lettered_tasks_total", "Tasks moved to dead_letter",
                            registry=r)
        self.submitted = Counter("tsched_submitted_tasks_total",
                                 "Tasks created (submits and schedule fires)", registry=r)
        self.cancelled = Counter("tsched_cancelled_tasks_total", "Tasks that became cancelled",
                                 registry=r)
        self.replayed = Counter("tsched_replayed_tasks_total", "Dead letters replayed", registry=r)
        self.leader_changes = Counter("tsched_raft_leader_changes_total",
                                      "New leaders seen taking office (their first barrier "
                                      "applied here)", registry=r)
        self.lateness = Histogram("tsched_scheduling_lateness_seconds",
                                  "Claim time minus run_at, per claimed task (0 when handed "
                                  "out early by prefetch)", buckets=LATENESS_BUCKETS_S,
                                  registry=r)
        self.apply_latency = Histogram("tsched_apply_latency_seconds",
                                       "From a batch's proposal (the proposer's clock in the "
                                       "command) to its application on this node",
                                       buckets=APPLY_BUCKETS_S, registry=r)
        self.apply_commands = Histogram("tsched_apply_batch_commands",
                                        "Commands per applied Raft entry",
                                        buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
                                        registry=r)
        self.request = Histogram("tsched_http_request_duration_seconds",
                                 "HTTP request duration by route (claims include their "
                                 "long-poll wait)", ["method", "route"],
                                 buckets=REQUEST_BUCKETS_S, registry=r)
        self.responses = Counter("tsched_http_responses_total", "HTTP responses by status",
                                 ["method", "route", "status"], registry=r)
        self.snapshot_stall = Histogram("tsched_raft_snapshot_stall_seconds",
                                        "How long each snapshot stopped the Raft thread",
                                        buckets=SNAPSHOT_BUCKETS_S, registry=r)
        r.register(_ScrapeCollector(self))

    # --- wiring --------------------------------------------------------------------------

    def bind(self, node: Any) -> None:
        """Scrape-time sources: `node.replica` (required), `node.claims` (optional)."""
        self._node = node

    def render(self) -> bytes:
        self._collect_snapshots()
        return generate_latest(self.registry)

    # --- the apply listener (Raft thread, under the replica lock) ------------------------

    def on_apply(self, seq: int, cmds: list, results: list) -> None:
        now_ms = self._clock_ms()
        if cmds:
            self.apply_commands.observe(len(cmds))
            first = min(cmd.now_ms for cmd in cmds)
            self.apply_latency.observe(max(0, now_ms - first) / 1000)
        for cmd, res in zip(cmds, results):
            handler = _EVENTS.get(type(cmd))
            if handler is not None:
                handler(self, cmd, res)

    def _on_claim(self, cmd, res) -> None:
        if not res.ok or not res.value:
            return
        tasks = res.value.get("tasks") or ()
        if not tasks:
            return
        self.claimed.inc(len(tasks))
        for t in tasks:
            started = t.started_at_ms if t.started_at_ms is not None else cmd.now_ms
            self.lateness.observe(max(0, started - t.run_at_ms) / 1000)

    def _on_submit(self, cmd, res) -> None:
        if res.ok and res.value and not res.value.get("duplicate"):
            self.submitted.inc()

    def _on_fire(self, cmd, res) -> None:
        if res.ok and res.value and res.value.get("task") is not None:
            self.submitted.inc()

    def _on_complete(self, cmd, res) -> None:
        # A repeated completion is answered from the request table: count the first only,
        # i.e. the one whose command ended the task (completed_at is this command's clock).
        task = _task(res)
        if task is not None and task.state == "completed":
            self.completed.inc()

    def _on_fail(self, cmd, res) -> None:
        task = _task(res)
        if task is None:
            return
        self.failed.inc()
        self._count_outcome(task.state)

    def _on_cancel(self, cmd, res) -> None:
        task = _task(res)
        if task is not None and task.state == "cancelled":
            self.cancelled.inc()

    def _on_replay(self, cmd, res) -> None:
        if _task(res) is not None:
            self.replayed.inc()

    def _on_tick(self, cmd, res) -> None:
        """A tick that expired leases reports the tasks it touched (see _tick_events)."""
        for state in _tick_events(res):
            self.expired.inc()
            self._count_outcome(state)

    def _on_barrier(self, cmd, res) -> None:
        term = _barrier_term(cmd.request_id)
        if term is None:
            return
        with self._lock:
            if term > self._leader_term:
                self._leader_term = term
                self.leader_changes.inc()

    def _count_outcome(self, state: str) -> None:
        if state == "pending":
            self.retried.inc()
        elif state == "dead_letter":
            self.dead.inc()
        elif state == "cancelled":
            self.cancelled.inc()

    # --- scrape time ---------------------------------------------------------------------

    def _collect_snapshots(self) -> None:
        replica = getattr(self._node, "replica", None)
        stalls = getattr(replica, "snapshot_stalls_ms", None)
        if stalls is None:
            return
        with self._lock:
            new = list(stalls[self._snapshots_seen:])
            self._snapshots_seen += len(new)
        for ms in new:
            self.snapshot_stall.observe(ms / 1000)

    def queue_view(self) -> QueueView | None:
        replica = getattr(self._node, "replica", None)
        if replica is None:
            return None
        with replica.read() as sm:
            stats = sm.stats()
            now_ms = max(sm.now_ms, self._clock_ms())
            return queue_view(stats, now_ms)

    def waiting_claims(self) -> int | None:
        claims = getattr(self._node, "claims", None)
        return None if claims is None else int(claims.waiting)


_EVENTS: dict[type, Callable] = {
    c.Claim: NodeMetrics._on_claim,
    c.SubmitTask: NodeMetrics._on_submit,
    c.Fire: NodeMetrics._on_fire,
    c.Complete: NodeMetrics._on_complete,
    c.Fail: NodeMetrics._on_fail,
    c.Cancel: NodeMetrics._on_cancel,
    c.Replay: NodeMetrics._on_replay,
    c.Tick: NodeMetrics._on_tick,
    c.Barrier: NodeMetrics._on_barrier,
}


def _task(res):
    if not res.ok or not res.value:
        return None
    return res.value.get("task")


def _tick_events(res) -> Iterable[str]:
    """States of the tasks whose lease a tick expired (value `{"expired": [Task, ...]}`)."""
    if not res.ok or not isinstance(res.value, dict):
        return ()
    return [t.state for t in res.value.get("expired") or ()]


def _barrier_term(request_id: str) -> int | None:
    """A new leader's first entry is `Barrier(request_id="barrier:<node>:<term>")`."""
    if not request_id.startswith("barrier:"):
        return None
    try:
        return int(request_id.rsplit(":", 1)[1])
    except ValueError:
        return None


class _ScrapeCollector(Collector):
    """Gauges computed at scrape time from the replica and the claim hub."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.m = metrics

    def describe(self):
        return []   # computed families: nothing to check at registration

    def collect(self):
        node = self.m._node
        replica = getattr(node, "replica", None)
        if replica is None:
            return
        yield from _raft_families(replica)
        view = self.m.queue_view()
        if view is not None:
            yield from _queue_families(view)
        waiting = self.m.waiting_claims()
        if waiting is not None:
            yield GaugeMetricFamily("tsched_waiting_claims",
                                    "Long-poll claims waiting at this node (the leader's hub)",
                                    value=waiting)


def _raft_families(replica) -> Iterable:
    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, value=value)

    leader = replica.leader_id()
    yield gauge("tsched_raft_term", "Current Raft term", replica.term)
    yield gauge("tsched_raft_commit_index", "Raft commit index known to this node",
                replica.commit_index)
    yield gauge("tsched_applied_seq", "State machine batches applied on this node",
                replica.applied_seq)
    yield gauge("tsched_raft_has_leader", "1 when this node sees a leader with a quorum",
                1 if leader is not None else 0)
    yield gauge("tsched_raft_is_leader", "1 when this node is the ready leader",
                1 if replica.is_ready_leader() else 0)
    written = getattr(replica, "snapshots_written", None)
    if written is not None:
        yield CounterMetricFamily("tsched_raft_snapshots", "Snapshots written", value=written)


def _queue_families(view: QueueView) -> Iterable:
    by_state = GaugeMetricFamily("tsched_tasks", "Retained tasks by state", labels=["state"])
    for state in STATES:
        by_state.add_metric([state], view.by_state.get(state, 0))
    yield by_state
    prio = GaugeMetricFamily("tsched_pending_tasks_by_priority", "Pending tasks by priority",
                             labels=["priority"])
    for p in PRIORITIES:
        prio.add_metric([str(p)], view.by_priority.get(p, 0))
    yield prio
    tenants = GaugeMetricFamily("tsched_tenant_tasks", "Retained tasks by tenant and state",
                                labels=["tenant", "state"])
    for tenant in sorted(view.by_tenant):
        counts = view.by_tenant[tenant]
        for state in STATES:
            tenants.add_metric([tenant, state], counts.get(state, 0))
    yield tenants
    yield GaugeMetricFamily("tsched_oldest_claimable_task_age_seconds",
                            "How long the oldest due pending task has waited (0: none is due)",
                            value=view.oldest_claimable_age_s or 0.0)


# --- HTTP ------------------------------------------------------------------------------------

METRICS = web.AppKey("metrics", NodeMetrics)


def route_of(request: web.Request) -> str:
    """The route template (`/v1/tasks/{task_id}`): bounded label values, never raw paths."""
    route = request.match_info.route
    resource = getattr(route, "resource", None)
    if resource is None:
        return "unmatched"
    return resource.canonical


@web.middleware
async def middleware(request: web.Request, handler) -> web.StreamResponse:
    metrics = request.app[METRICS]
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as e:
        status = e.status
        raise
    except asyncio.CancelledError:
        status = 499   # the client went away (nginx's convention)
        raise
    except Exception as e:
        status = getattr(e, "status", 500)
        raise
    finally:
        route = route_of(request)
        metrics.request.labels(request.method, route).observe(time.perf_counter() - started)
        metrics.responses.labels(request.method, route, str(status)).inc()


async def handle_metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
