"""Prometheus metrics of one node (DESIGN.md section 12), in a registry of its own per app.

Three sources, each as cheap as it can be:

- queue gauges (tasks by state / priority / tenant, the oldest claimable task's age) and
  Raft gauges are computed when Prometheus scrapes, from `sm.stats()` and the Replica's
  properties, so nothing is maintained for them between scrapes;
- event counters (claims, completions, failures, retries, lease expirations, dead letters)
  and the lateness histogram come from applied commands' results through the Replica's
  apply listener: a type check per command, and work only for the commands that count
  (an `AttemptTracker` follows running attempts, so that each is counted once and lease
  expirations, which a Tick's result does not list, are found);
- request durations come from an aiohttp middleware.

Every replica applies the same commands, so every node reports the same event counts;
dashboards should take `max` across nodes (or the leader's series), never `sum`.
"""
from __future__ import annotations

import asyncio
import bisect
import heapq
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from tsched.statemachine import commands as c
from tsched.statemachine.errors import OVERLOADED

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATES = ("pending", "running", "completed", "cancelled", "dead_letter", "discarded")
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
# A handler's run, claim to completion: from a few ms (a notification) to an hour (a nightly
# interest run); a lease is at most an hour unless heartbeats extend it.
RUN_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                 120.0, 300.0, 600.0, 1800.0, 3600.0)

# Label cardinality is bounded, whatever the clients send (DESIGN 14.4). The per-tenant
# gauges show the tenants that matter most (deepest queue, longest wait) and fold the rest
# into OTHER_LABEL; the run-duration histogram has a series for the first task types this
# node sees and folds later ones. No tenant can be named OTHER_LABEL (tenant names are
# [A-Za-z0-9_.-]); a task type of that name shares the folded series.
OTHER_LABEL = "(other)"
TENANT_LABELS_MAX = 100
TASK_TYPE_LABELS_MAX = 100


@dataclass
class QueueView:
    """`sm.stats()` in the shape metrics and the dashboard use."""

    by_state: dict[str, int] = field(default_factory=dict)
    by_priority: dict[int, int] = field(default_factory=dict)       # pending tasks
    by_tenant: dict[str, dict[str, int]] = field(default_factory=dict)   # pending, running
    oldest_claimable_age_s: float | None = None                     # None: nothing is due
    schedules: int = 0
    oldest_due_age_s_by_tenant: dict[str, float] = field(default_factory=dict)  # due ones only


def queue_view(sm, now_ms: int) -> QueueView:
    """Counts from `sm.stats()` plus the lag; the caller holds the replica lock."""
    stats = sm.stats()
    by_state = {s: int(stats["tasks_by_state"].get(s, 0)) for s in STATES}
    by_priority = {int(p): int(n) for p, n in stats["pending_by_priority"].items()}
    by_tenant = {t: {"pending": int(v["pending"]), "running": int(v["running"])}
                 for t, v in sorted(stats["tenants"].items())}
    oldest = _oldest_due_ms(sm, now_ms) if by_state["pending"] else {}
    ages = {t: (now_ms - at) / 1000 for t, at in sorted(oldest.items())}
    age = max(ages.values()) if ages else None
    return QueueView(by_state, by_priority, by_tenant, age, int(stats.get("schedules", 0)),
                     ages)


def _oldest_due_ms(sm, now_ms: int) -> dict[str, int]:
    """Per tenant, the earliest run_at among the due tasks at the head of each of its
    (tenant, task type) queues: how long the tenant's next task has waited for a worker.

    Exact within a priority (FIFO); a lower-priority task may wait longer than the heads
    until aging lifts it. O(queues), never a scan of the pending tasks. The state machine
    has no public read for this (`next_due_ms` clamps due tasks to now), so it peeks at
    the claim queue's heap tops, read-only; if their layout changes the gauge goes empty
    rather than failing the scrape. Tenants with nothing due are absent.
    """
    try:
        best: dict[str, int] = {}
        for buckets in sm._queue.by_type.values():
            for tenant, bucket in buckets.items():
                heads = [bucket.ready[0][1]] if bucket.ready else []
                if bucket.delayed and bucket.delayed[0][0] <= now_ms:
                    heads.append(bucket.delayed[0][0])   # due, not yet promoted
                for at in heads:
                    if at <= now_ms and at < best.get(tenant, at + 1):
                        best[tenant] = at
        return best
    except (AttributeError, IndexError, TypeError):
        return {}


class AttemptTracker:
    """The running attempts this node saw start, to count how they end.

    A Tick's result is empty, so lease expirations are found here: attempts are kept by
    (task_id, fencing_token) with their live Task, in a heap by lease deadline. When the
    state clock passes a deadline, the task tells what happened: still running under the
    same token means a heartbeat extended the lease (re-queued); an attempt that ended
    "lease_expired" or "timed_out" is an expiration. Completions and failures remove their
    attempt, so a repeated report (same token) is not counted twice. Memory is bounded by
    the running tasks; the work per tick by the deadlines that passed.
    """

    # An attempt still shown running this long after its deadline belongs to a state that
    # a snapshot install replaced: forget it uncounted.
    ORPHAN_GRACE_MS = 60_000
    # Ended attempts leave their heap entry behind (lazy deletion), and only a Tick pops
    # entries. Under a steady load whose tasks finish within their leases no Tick is due
    # for minutes: the heap held every attempt since the last one (1,000,000 entries after
    # 5 minutes, ~100 MB), and the next Tick (the first eviction) walked them all with the
    # GIL held, 2 s on every node at once, and the cluster elected again. So the heap is
    # rebuilt from the live attempts whenever it holds more than twice as many entries
    # (plus this slack): amortized O(1) per attempt, and bounded by the running tasks.
    HEAP_SLACK = 1_024

    def __init__(self) -> None:
        self._live: dict[tuple[str, int], Any] = {}
        self._heap: list[tuple[int, int, str]] = []

    def __len__(self) -> int:
        return len(self._live)

    def started(self, task) -> bool:
        """A claimed task; False when this attempt is known already (a repeated answer)."""
        key = (task.task_id, task.fencing_token)
        if key in self._live:
            return False
        self._live[key] = task
        heapq.heappush(self._heap, _heap_entry(task))
        if len(self._heap) > 2 * len(self._live) + self.HEAP_SLACK:
            self._rebuild_heap()
        return True

    def _rebuild_heap(self) -> None:
        """Only the live attempts, each at its current lease deadline (what `expired`
        would re-push it at)."""
        self._heap = [_heap_entry(task) for task in self._live.values()]
        heapq.heapify(self._heap)

    def heap_entries(self) -> int:
        return len(self._heap)

    def ended(self, task_id: str, token: int) -> bool:
        """A completion or failure; False when its attempt was not running (a repeat)."""
        return self._live.pop((task_id, token), None) is not None

    def expired(self, clock_ms: int) -> list:
        """Tasks whose attempt a tick ended by lease expiry or timeout, up to `clock_ms`."""
        out, later = [], []
        heap = self._heap
        while heap and heap[0][0] <= clock_ms:
            deadline, token, task_id = heapq.heappop(heap)
            task = self._live.get((task_id, token))
            if task is None:
                continue                      # ended by a completion, failure or release
            if task.state == "running" and task.fencing_token == token:
                lease = task.lease_expires_at_ms or 0
                if lease > clock_ms:
                    later.append((lease, token, task_id))      # extended by a heartbeat
                elif clock_ms - lease <= self.ORPHAN_GRACE_MS:
                    later.append((deadline, token, task_id))   # its tick is yet to come
                else:
                    del self._live[(task_id, token)]
                continue
            del self._live[(task_id, token)]
            if _attempt_outcome(task, token) in ("lease_expired", "timed_out"):
                out.append(task)
        for entry in later:
            heapq.heappush(heap, entry)
        return out


def _heap_entry(task) -> tuple[int, int, str]:
    return (task.lease_expires_at_ms or 0, task.fencing_token, task.task_id)


def _attempt_outcome(task, token: int) -> str | None:
    for attempt in reversed(task.attempts):
        if attempt.fencing_token == token:
            return attempt.outcome
    return None


class EventCounts:
    """Counters of applied events: plain ints, written only by the Raft thread, read by
    scrapes (reading an int is atomic). An apply costs attribute increments, not a lock and
    a prometheus_client call per event: at 10,000 task lifecycles per second that
    difference is a few percent of a core, on every node."""

    FAMILIES = {   # attribute: (family name without _total, help)
        "submitted": ("tsched_submitted_tasks", "Tasks created (submits and schedule fires)"),
        "claimed": ("tsched_claimed_tasks", "Attempts started by claims"),
        "completed": ("tsched_completed_tasks", "Tasks completed"),
        "failed": ("tsched_failed_attempts", "Attempts reported failed by workers"),
        "expired": ("tsched_lease_expirations",
                    "Attempts ended by an expired lease or the task's timeout"),
        "retried": ("tsched_retried_tasks",
                    "Failed or expired attempts whose task went back to pending"),
        "dead": ("tsched_dead_lettered_tasks", "Tasks moved to dead_letter"),
        "cancelled": ("tsched_cancelled_tasks", "Tasks that became cancelled"),
        "replayed": ("tsched_replayed_tasks", "Dead letters replayed"),
        "leader_changes": ("tsched_raft_leader_changes",
                           "Leaders seen taking office (their first barrier applied here)"),
    }
    __slots__ = tuple(FAMILIES)

    def __init__(self) -> None:
        for name in self.FAMILIES:
            setattr(self, name, 0)

    def families(self) -> Iterable:
        for attr, (name, doc) in self.FAMILIES.items():
            yield CounterMetricFamily(name, doc, value=getattr(self, attr))


class BucketHistogram:
    """A histogram with one writer (the Raft thread): bucket counts as ints, exported at
    scrape time. Buckets are `le` bounds, as Prometheus defines them."""

    def __init__(self, name: str, doc: str, bounds: tuple) -> None:
        self.name, self.doc, self.bounds = name, doc, tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)     # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs, as the exposition format has them."""
        counts, total, out = list(self.counts), 0, []
        for bound, n in zip((*map(floatToGoString, self.bounds), "+Inf"), counts):
            total += n
            out.append((bound, total))
        return out

    def family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.doc, buckets=self.buckets(),
                                     sum_value=self.sum)


class LabelledHistograms:
    """A BucketHistogram per value of one label, for the first `values_max` values seen;
    later values share OTHER_LABEL, so a client cannot mint series. One writer (the Raft
    thread); scrapes read a copy of the table."""

    def __init__(self, name: str, doc: str, label: str, bounds: tuple,
                 values_max: int) -> None:
        self.name, self.doc, self.label, self.bounds = name, doc, label, tuple(bounds)
        self.values_max = values_max
        self.by_value: dict[str, BucketHistogram] = {}

    def observe(self, label_value: str, value: float) -> None:
        histogram = self.by_value.get(label_value)
        if histogram is None:
            own = len(self.by_value) - (OTHER_LABEL in self.by_value)
            if own >= self.values_max:
                label_value = OTHER_LABEL
            histogram = self.by_value.get(label_value)
            if histogram is None:
                histogram = BucketHistogram(self.name, self.doc, self.bounds)
                self.by_value[label_value] = histogram
        histogram.observe(value)

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=[self.label])
        for value, histogram in sorted(list(self.by_value.items())):
            family.add_metric([value], histogram.buckets(), histogram.sum)
        return family


class NodeMetrics:
    """The metrics of one node. `attach(node)` connects the sources."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._node: Any = None
        self.admission: Any = None          # admission.Admission, bound with the node
        self._lock = threading.Lock()      # scrape-time bookkeeping
        self._state_clock_ms = 0           # running max of applied commands' now_ms
        self._leader_term = -1
        self._snapshots_seen = 0
        self.attempts = AttemptTracker()   # Raft thread only
        self.events = EventCounts()        # Raft thread writes
        self.shed_priority = 0             # submits the state machine shed (Raft thread)
        self.lateness = BucketHistogram(
            "tsched_scheduling_lateness_seconds",
            "Claim time minus run_at, per claimed task (0 when handed out early by prefetch)",
            LATENESS_BUCKETS_S)
        self.apply_latency = BucketHistogram(
            "tsched_apply_latency_seconds",
            "From a batch's proposal (the proposer's clock in its commands) to its "
            "application on this node (on a follower, includes clock skew to the proposer)",
            APPLY_BUCKETS_S)
        self.run_time = LabelledHistograms(
            "tsched_task_run_seconds",
            "Completed tasks' completed_at - started_at (their last attempt), by task type",
            "task_type", RUN_BUCKETS_S, TASK_TYPE_LABELS_MAX)
        self.apply_commands = BucketHistogram(
            "tsched_apply_batch_commands", "Commands per applied Raft entry",
            (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
        r = self.registry
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

    def attach(self, node: Any) -> Callable[[int, list, list], None]:
        """Bind the scrape-time sources and return the apply listener to register.

        Call it, and register the listener, under the replica lock: the attempts already
        running are seeded from the state, so that their ends are counted too."""
        self._node = node
        with node.replica.read() as sm:
            self._state_clock_ms = sm.now_ms
            cursor = None
            while True:
                page, cursor = sm.list_tasks(state="running", cursor=cursor, limit=1000)
                for task in page:
                    self.attempts.started(task)
                if cursor is None:
                    break
        return self.on_apply

    def render(self) -> bytes:
        self._collect_snapshots()
        return generate_latest(self.registry)

    # --- the apply listener (Raft thread, under the replica lock) ------------------------

    def on_apply(self, seq: int, cmds: list, results: list) -> None:
        if not cmds:
            return
        self.apply_commands.observe(len(cmds))
        first = min(cmd.now_ms for cmd in cmds)
        self.apply_latency.observe(max(0, self._clock_ms() - first) / 1000)
        for cmd, res in zip(cmds, results):
            # The state clock is the running max of commands' now_ms (DESIGN section 3).
            if cmd.now_ms > self._state_clock_ms:
                self._state_clock_ms = cmd.now_ms
            handler = _EVENTS.get(type(cmd))
            if handler is not None and res.ok:
                handler(self, cmd, res.value)
            elif res.code == OVERLOADED:
                self.shed_priority += 1

    def _now(self, stamp_ms: int | None) -> bool:
        """Did the transition stamped `stamp_ms` happen at this command? (A repeated
        request is answered with the task as it is, stamped earlier.)"""
        return stamp_ms is not None and stamp_ms >= self._state_clock_ms

    def _on_submit(self, cmd, value) -> None:
        if not value.get("duplicate") and self._now(value["task"].created_at_ms):
            self.events.submitted += 1

    def _on_fire(self, cmd, value) -> None:
        task = value.get("task")
        if task is not None and self._now(task.created_at_ms):
            self.events.submitted += 1

    def _on_claim(self, cmd, value) -> None:
        started, observe = self.attempts.started, self.lateness.observe
        for task in value["tasks"]:
            if started(task):
                self.events.claimed += 1
                at = task.started_at_ms if task.started_at_ms is not None else cmd.now_ms
                observe(max(0, at - task.run_at_ms) / 1000)

    def _on_complete(self, cmd, value) -> None:
        if self.attempts.ended(cmd.task_id, cmd.fencing_token):
            self.events.completed += 1
            task = value["task"]
            if task.started_at_ms is not None and task.completed_at_ms is not None:
                self.run_time.observe(task.task_type,
                                      max(0, task.completed_at_ms - task.started_at_ms) / 1000)

    def _on_fail(self, cmd, value) -> None:
        if self.attempts.ended(cmd.task_id, cmd.fencing_token):
            self.events.failed += 1
            self._count_outcome(value["task"].state)

    def _on_release(self, cmd, value) -> None:
        self.attempts.ended(cmd.task_id, cmd.fencing_token)

    def _on_cancel(self, cmd, value) -> None:
        task = value["task"]
        if task.state == "cancelled" and self._now(task.completed_at_ms):
            self.events.cancelled += 1

    def _on_replay(self, cmd, value) -> None:
        self.events.replayed += 1

    def _on_tick(self, cmd, value) -> None:
        for task in self.attempts.expired(self._state_clock_ms):
            self.events.expired += 1
            self._count_outcome(task.state)

    def _on_barrier(self, cmd, value) -> None:
        term = _barrier_term(cmd.request_id)
        if term is not None and term > self._leader_term:
            self._leader_term = term
            self.events.leader_changes += 1

    def _count_outcome(self, state: str) -> None:
        if state == "pending":
            self.events.retried += 1
        elif state == "dead_letter":
            self.events.dead += 1
        elif state == "cancelled":
            self.events.cancelled += 1

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
            return queue_view(sm, max(sm.now_ms, self._clock_ms()))

    def waiting_claims(self) -> int | None:
        claims = getattr(self._node, "claims", None)
        return None if claims is None else int(claims.waiting)


_EVENTS: dict[type, Callable] = {
    c.SubmitTask: NodeMetrics._on_submit,
    c.Fire: NodeMetrics._on_fire,
    c.Claim: NodeMetrics._on_claim,
    c.Complete: NodeMetrics._on_complete,
    c.Fail: NodeMetrics._on_fail,
    c.Release: NodeMetrics._on_release,
    c.Cancel: NodeMetrics._on_cancel,
    c.Replay: NodeMetrics._on_replay,
    c.Tick: NodeMetrics._on_tick,
    c.Barrier: NodeMetrics._on_barrier,
}


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
        m = self.m
        yield from m.events.families()
        yield _shed_family(m.shed_priority, getattr(getattr(m._node, "proposer", None),
                                                    "refused_full", 0),
                           getattr(m.admission, "refused", 0))
        for histogram in (m.lateness, m.run_time, m.apply_latency, m.apply_commands):
            yield histogram.family()
        replica = getattr(m._node, "replica", None)
        if replica is None:
            return
        yield from _raft_families(replica)
        view = self.m.queue_view()
        if view is not None:
            yield from _queue_families(view)
        policy = getattr(m._node, "gc_policy", None)
        if policy is not None:
            yield from _gc_families(policy)
        waiting = self.m.waiting_claims()
        if waiting is not None:
            yield GaugeMetricFamily("tsched_waiting_claims",
                                    "Long-poll claims waiting at this node (the leader's hub)",
                                    value=waiting)


def _shed_family(priority: int, queue_full: int, busy: int) -> CounterMetricFamily:
    """Submits answered 429 `overloaded` (DESIGN 14.2): shed by the state machine for their
    priority (the same on every node), refused by this node's full proposal queue, or
    refused before they were read because this node had too many submits in progress."""
    family = CounterMetricFamily("tsched_submits_shed", "Submits refused as overloaded",
                                 labels=["reason"])
    family.add_metric(["priority"], priority)
    family.add_metric(["queue_full"], queue_full)
    family.add_metric(["busy"], busy)
    return family


def _gc_families(policy) -> Iterable:
    yield GaugeMetricFamily("tsched_gc_frozen_objects",
                            "Objects kept out of full garbage collections (see gcpolicy.py)",
                            value=policy.frozen_objects())
    yield CounterMetricFamily("tsched_gc_full_collections",
                              "Full (generation 2) garbage collections", value=policy.full_collections)
    yield GaugeMetricFamily("tsched_gc_full_pause_seconds_max",
                            "Longest full garbage collection pause since start",
                            value=policy.full_pause_s_max)
    # Every generation's collections pause the process with the GIL held.
    count = CounterMetricFamily("tsched_gc_collections", "Garbage collections by generation "
                                "(0 young, 1 middle, 2 full)", labels=["generation"])
    pause = GaugeMetricFamily("tsched_gc_pause_seconds_max", "Longest garbage collection "
                              "pause since start, by generation", labels=["generation"])
    for generation in range(3):
        count.add_metric([str(generation)], policy.collections[generation])
        pause.add_metric([str(generation)], policy.pause_s_max[generation])
    yield count
    yield pause


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
    connected = getattr(replica, "connected_peers", None)
    if connected is not None:   # a rolling restart waits for all before the next stop
        yield gauge("tsched_raft_peers_connected", "Raft peers this node is connected to",
                    len(connected))
    written = getattr(replica, "snapshots_written", None)
    if written is not None:
        yield CounterMetricFamily("tsched_raft_snapshots", "Snapshots written", value=written)
    stats = getattr(replica, "replication", None)
    if stats is not None:
        yield from _replication_families(stats)
    watchdog = getattr(replica, "watchdog", None)
    if watchdog is not None:
        yield CounterMetricFamily(
            "tsched_raft_late_ticks", "Raft ticks that came later than half an election "
            "timeout after the one before (CPU starvation or a pause)", value=watchdog.late_ticks)
    cut = getattr(replica, "apply_slices_cut", None)
    if cut is not None:
        yield CounterMetricFamily(
            "tsched_raft_apply_slices_cut", "Ticks that stopped applying at their time budget "
            "with committed entries left (applied by the next ticks)", value=cut)


def _replication_families(stats) -> Iterable:
    """Replication waste (node/raft/replication.py): all zero in normal operation."""
    for name, doc, value in (
            ("resent_entries", "Log entries the leader sent again to a peer", stats.resent_entries),
            ("stale_acks", "Success replies that would have moved a peer's next index back",
             stats.stale_acks),
            ("held_entries", "Entries received that this follower already held (kept)",
             stats.held_entries),
            ("truncations", "Times this follower cut its log back on a term conflict",
             stats.truncations),
            ("truncated_entries", "Log entries removed on term conflicts", stats.truncated_entries)):
        yield CounterMetricFamily(f"tsched_raft_{name}", doc, value=value)


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
    tenants = GaugeMetricFamily(
        "tsched_tenant_tasks", f"Pending and running tasks by tenant (the {TENANT_LABELS_MAX} "
        f"with the most; the others summed as tenant=\"{OTHER_LABEL}\")",
        labels=["tenant", "state"])
    for tenant, counts in bounded_tenants(view.by_tenant, _live_count, _sum_counts):
        for state in ("pending", "running"):
            tenants.add_metric([tenant, state], counts.get(state, 0))
    yield tenants
    ages = GaugeMetricFamily(
        "tsched_tenant_oldest_due_task_age_seconds",
        f"How long the tenant's longest-waiting due task at the head of a task type's queue "
        f"has waited; only tenants with a due task (the {TENANT_LABELS_MAX} longest; the "
        f"others' maximum as tenant=\"{OTHER_LABEL}\")", labels=["tenant"])
    for tenant, age in bounded_tenants(view.oldest_due_age_s_by_tenant, float, max):
        ages.add_metric([tenant], age)
    yield ages
    yield GaugeMetricFamily("tsched_schedules", "Schedules defined", value=view.schedules)
    yield GaugeMetricFamily("tsched_oldest_claimable_task_age_seconds",
                            "How long the longest-waiting due task at the head of a "
                            "(tenant, task type) queue has waited (0: none is due)",
                            value=view.oldest_claimable_age_s or 0.0)


def bounded_tenants(values: dict, rank: Callable, fold: Callable,
                    limit: int = TENANT_LABELS_MAX) -> list[tuple[str, Any]]:
    """(tenant, value) for the `limit` tenants ranking highest (ties by name), then the
    others folded into one (OTHER_LABEL, value), so a family has at most limit + 1 series."""
    ranked = sorted(values.items(), key=lambda kv: (-rank(kv[1]), kv[0]))
    kept, rest = ranked[:limit], ranked[limit:]
    out = sorted(kept)
    if rest:
        out.append((OTHER_LABEL, fold(v for _, v in rest)))
    return out


def _live_count(counts: dict[str, int]) -> int:
    return counts.get("pending", 0) + counts.get("running", 0)


def _sum_counts(many: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in many:
        for state, n in counts.items():
            total[state] = total.get(state, 0) + n
    return total


# --- HTTP ------------------------------------------------------------------------------------

METRICS = web.AppKey("metrics", NodeMetrics)
# Label values come from this list (and route templates): a client cannot mint new series.
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))


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
        method = request.method if request.method in HTTP_METHODS else "other"
        metrics.request.labels(method, route).observe(time.perf_counter() - started)
        metrics.responses.labels(method, route, str(status)).inc()


async def handle_metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
