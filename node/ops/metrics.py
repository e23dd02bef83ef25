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

This module is NodeMetrics (the sources wired together, the apply listener) and the HTTP
middleware and handler; the one-writer counters are counters.py, the attempts attempts.py,
the queue's counts queue_view.py and the families computed at scrape time scrape.py.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypedDict

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from tsched.node.gcpolicy import GcPolicy
from tsched.node.ops.attempts import AttemptTracker
from tsched.node.ops.counters import (TASK_TYPE_LABELS_MAX, BucketHistogram, EventCounts,
                                      LabelledHistograms, TierHistograms)
from tsched.node.ops.queue_view import QueueView, queue_view
from tsched.node.ops.scrape import ScrapeCollector, Shedding
from tsched.statemachine import commands as c
from tsched.statemachine.errors import OVERLOADED, Result
from tsched.statemachine.limits import Limits
from tsched.statemachine.model import Task
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier, tier_of

if TYPE_CHECKING:   # raft/ never imports ops/: no cycle, and no pysyncobj for the types
    from tsched.node.raft.replica import Replica

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Lateness of a claimed task: early dispatch aims at a few ms, plain claims at tens of ms,
# and a backlog shows up in seconds to minutes. The default tiers' SLAs (1 s, 5 s, 1 min,
# 1 h) are bounds, and a bound past the last SLA lets a p99 over 1 h show as such.
LATENESS_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                      10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 7200.0)
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


# Resumes remembered for the lateness histogram: as many as pauses may stand at once.
RESUMES_KEPT = Limits().queue_pauses_max


class Waiting(Protocol):
    """The leader's claim hub (scheduling/claim_hub.py) as metrics count it."""

    @property
    def waiting(self) -> int: ...


class Attachable(Protocol):
    """What metrics read of the node they attach to (services.Node)."""

    @property
    def replica(self) -> Replica: ...

    @property
    def claims(self) -> Waiting | None: ...

    @property
    def gc_policy(self) -> GcPolicy | None: ...


class Applied(TypedDict, total=False):
    """The value of an applied command's Result, as far as the counted events read it."""

    task: Task
    tasks: list[Task]
    duplicate: bool


class Fired(TypedDict, total=False):
    """A Fire's value: its task is None when the occurrence was skipped or missed."""

    task: Task | None


class NodeMetrics:
    """The metrics of one node. `attach(node)` connects the sources."""

    def __init__(self, clock_ms: Callable[[], int] | None = None,
                 tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._node: Attachable | None = None
        self.admission: Shedding | None = None   # api/admission.Admission, bound with the node
        self._lock = threading.Lock()      # scrape-time bookkeeping
        self._state_clock_ms = 0           # running max of applied commands' now_ms
        self._leader_term = -1
        self._snapshots_seen = 0
        self.attempts = AttemptTracker()   # Raft thread only
        self.events = EventCounts()        # Raft thread writes
        self.tiers = tiers
        # submits the state machine shed, by the task's tier (Raft thread)
        self.shed_priority: dict[str, int] = {}
        self.aging_interval_ms = Limits().aging_interval_ms   # the replica's, once attached
        # Paused queues (issue 48) lifted, by selector key ((task type, tenant), "" for any)
        # -> the state clock at the resume: a task claimed later whose run_at is before it
        # waited in the pause, on purpose, and is left out of the lateness histogram.
        self.resumed: dict[tuple[str, str], int] = {}
        self.lateness = TierHistograms(
            "tsched_scheduling_lateness_seconds",
            "Claim time minus run_at, per claimed task (0 when handed out early by prefetch), "
            "by the task's tier at the claim", LATENESS_BUCKETS_S, tiers)
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
        r.register(ScrapeCollector(self))

    # --- wiring --------------------------------------------------------------------------

    def attach(self, node: Attachable) -> Callable[[int, Sequence[c.Command],
                                                    Sequence[Result]], None]:
        """Bind the scrape-time sources and return the apply listener to register.

        Call it, and register the listener, under the replica lock: the attempts already
        running are seeded from the state, so that their ends are counted too."""
        self._node = node
        with node.replica.read() as sm:
            self._state_clock_ms = sm.now_ms
            self.aging_interval_ms = sm.limits.aging_interval_ms
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

    def on_apply(self, seq: int, cmds: Sequence[c.Command], results: Sequence[Result]) -> None:
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
                tier = tier_of(getattr(cmd, "priority", 0), self.tiers).name
                self.shed_priority[tier] = self.shed_priority.get(tier, 0) + 1

    def _now(self, stamp_ms: int | None) -> bool:
        """Did the transition stamped `stamp_ms` happen at this command? (A repeated
        request is answered with the task as it is, stamped earlier.)"""
        return stamp_ms is not None and stamp_ms >= self._state_clock_ms

    def _on_submit(self, cmd: c.SubmitTask, value: Applied) -> None:
        if not value.get("duplicate") and self._now(value["task"].created_at_ms):
            self.events.submitted += 1

    def _on_fire(self, cmd: c.Fire, value: Fired) -> None:
        task = value.get("task")
        if task is not None and self._now(task.created_at_ms):
            self.events.submitted += 1

    def _on_claim(self, cmd: c.Claim, value: Applied) -> None:
        started, of_priority = self.attempts.started, self.lateness.of_priority
        now, aging = cmd.now_ms, self.aging_interval_ms
        resumed = self.resumed
        for task in value["tasks"]:
            if started(task):
                self.events.claimed += 1
                if resumed and self._was_paused(task):
                    continue
                at = task.started_at_ms if task.started_at_ms is not None else now
                # The tier of its effective priority at the claim (DESIGN 5): aging counts
                # from run_at, so a task handed out before it is due has its own priority
                # (at most 10: the state machine bounds priorities).
                wait = now - task.run_at_ms
                eff = task.priority - wait // aging if wait > 0 else task.priority
                of_priority[eff if eff > 0 else 0].observe(max(0, at - task.run_at_ms) / 1000)

    def _was_paused(self, task: Task) -> bool:
        """Was the task due before a resume of a pause that covers it (so it waited in
        the pause)?"""
        resumed, run_at = self.resumed, task.run_at_ms
        for key in ((task.task_type, task.tenant), (task.task_type, ""), ("", task.tenant)):
            at = resumed.get(key)
            if at is not None and run_at < at:
                return True
        return False

    def _on_resume(self, cmd: c.ResumeQueue, value: object) -> None:
        key = (cmd.task_type or "", cmd.tenant or "")
        self.resumed.pop(key, None)        # re-inserted last: the dict stays oldest first
        self.resumed[key] = self._state_clock_ms
        if len(self.resumed) > RESUMES_KEPT:
            del self.resumed[next(iter(self.resumed))]

    def _on_complete(self, cmd: c.Complete, value: Applied) -> None:
        if self.attempts.ended(cmd.task_id, cmd.fencing_token):
            self.events.completed += 1
            task = value["task"]
            if task.started_at_ms is not None and task.completed_at_ms is not None:
                self.run_time.observe(task.task_type,
                                      max(0, task.completed_at_ms - task.started_at_ms) / 1000)

    def _on_fail(self, cmd: c.Fail, value: Applied) -> None:
        if self.attempts.ended(cmd.task_id, cmd.fencing_token):
            self.events.failed += 1
            self._count_outcome(value["task"].state)

    def _on_release(self, cmd: c.Release, value: Applied) -> None:
        self.attempts.ended(cmd.task_id, cmd.fencing_token)

    def _on_cancel(self, cmd: c.Cancel, value: Applied) -> None:
        task = value["task"]
        if task.state == "cancelled" and self._now(task.completed_at_ms):
            self.events.cancelled += 1

    def _on_replay(self, cmd: c.Replay, value: Applied) -> None:
        self.events.replayed += 1

    def _on_tick(self, cmd: c.Tick, value: Applied) -> None:
        for task in self.attempts.expired(self._state_clock_ms):
            self.events.expired += 1
            self._count_outcome(task.state)

    def _on_end_session(self, cmd: c.EndSession, value: Applied) -> None:
        if not cmd.expired:
            return
        self.events.sessions_expired += 1
        for task in self.attempts.given_back(cmd.worker_id):
            self.events.expired += 1
            self._count_outcome(task.state)

    def _on_barrier(self, cmd: c.Barrier, value: Applied) -> None:
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

    def replica(self) -> Replica | None:
        return getattr(self._node, "replica", None)

    def gc_policy(self) -> GcPolicy | None:
        return getattr(self._node, "gc_policy", None)

    def _collect_snapshots(self) -> None:
        replica = self.replica()
        stalls = getattr(replica, "snapshot_stalls_ms", None)
        if stalls is None:
            return
        with self._lock:
            new = list(stalls[self._snapshots_seen:])
            self._snapshots_seen += len(new)
        for ms in new:
            self.snapshot_stall.observe(ms / 1000)

    def queue_view(self) -> QueueView | None:
        replica = self.replica()
        if replica is None:
            return None
        with replica.read() as sm:
            return queue_view(sm, max(sm.now_ms, self._clock_ms()))

    def waiting_claims(self) -> int | None:
        claims = getattr(self._node, "claims", None)
        return None if claims is None else int(claims.waiting)

    def worker_slots(self) -> dict[str, tuple[int, int]] | None:
        """The workers' busy and idle slots by task type, at the ready leader (which hears
        them); None elsewhere, so only the leader exports them."""
        replica, slots = self.replica(), getattr(self._node, "worker_slots", None)
        if replica is None or slots is None or not replica.is_ready_leader():
            return None
        figures: dict[str, tuple[int, int]] = slots.figures(time.monotonic())
        return figures


# Each handler takes its own command class: (metrics, command, its result's value).
_EVENTS: dict[type[c.Command], Callable[..., None]] = {
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
    c.ResumeQueue: NodeMetrics._on_resume,
    c.EndSession: NodeMetrics._on_end_session,
}


def _barrier_term(request_id: str) -> int | None:
    """A new leader's first entry is `Barrier(request_id="barrier:<node>:<term>")`."""
    if not request_id.startswith("barrier:"):
        return None
    try:
        return int(request_id.rsplit(":", 1)[1])
    except ValueError:
        return None


# --- HTTP ------------------------------------------------------------------------------------

METRICS = web.AppKey("metrics", NodeMetrics)
# The HTTP status an exception a handler raised is answered with (the API maps its errors).
ERROR_STATUS: web.AppKey[Callable[[Exception], int]] = web.AppKey("error_status")
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
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
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
        status = request.app[ERROR_STATUS](e) if ERROR_STATUS in request.app else 500
        raise
    finally:
        route = route_of(request)
        method = request.method if request.method in HTTP_METHODS else "other"
        metrics.request.labels(method, route).observe(time.perf_counter() - started)
        metrics.responses.labels(method, route, str(status)).inc()


async def handle_metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
