"""The families computed when Prometheus scrapes a node: event counters and histograms as
they stand, Raft and replication gauges from the Replica's properties, queue gauges from
`sm.stats()` (queue_view.py), GC and claim-hub gauges. Label values stay bounded: per-tenant
series for the tenants that matter most, the others folded into OTHER_LABEL.

The collector reads its sources through `ScrapeSource`, which metrics.NodeMetrics
satisfies: metrics.py registers the collector, and this module never imports it back."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tsched.node.gcpolicy import GcPolicy
from tsched.node.ops.counters import (OTHER_LABEL, TENANT_LABELS_MAX, UNKNOWN_TIER,
                                      BucketHistogram, EventCounts, LabelledHistograms,
                                      TierHistograms)
from tsched.node.ops.capacity import bounded_labels, capacity_families
from tsched.node.ops.queue_view import PRIORITIES, STATES, QueueView
from tsched.statemachine.tiers import Tier

if TYPE_CHECKING:   # raft/ never imports ops/: no cycle, and no pysyncobj for the types
    from tsched.node.raft.replica import Replica
    from tsched.node.raft.replication import ReplicationStats

V = TypeVar("V")


class Shedding(Protocol):
    """The submits a node refused itself (api/admission.py's `Admission`)."""

    @property
    def shed(self) -> dict[tuple[str, str], int]: ...


class ScrapeSource(Protocol):
    """What the collector reads at scrape time (metrics.NodeMetrics)."""

    events: EventCounts
    tiers: tuple[Tier, ...]
    shed_priority: dict[str, int]
    admission: Shedding | None
    lateness: TierHistograms
    run_time: LabelledHistograms
    apply_latency: BucketHistogram
    apply_commands: BucketHistogram

    def replica(self) -> Replica | None: ...

    def gc_policy(self) -> GcPolicy | None: ...

    def queue_view(self) -> QueueView | None: ...

    def waiting_claims(self) -> int | None: ...

    def worker_slots(self) -> dict[str, tuple[int, int]] | None: ...


class ScrapeCollector(Collector):
    """Gauges computed at scrape time from the replica and the claim hub."""

    def __init__(self, metrics: ScrapeSource) -> None:
        self.m = metrics

    def describe(self) -> list[Metric]:
        return []   # computed families: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        m = self.m
        yield from m.events.families()
        shed = m.admission.shed if m.admission is not None else {}
        yield _shed_family(m.tiers, m.shed_priority, shed)
        for histogram in (m.lateness, m.run_time, m.apply_latency, m.apply_commands):
            yield histogram.family()
        replica = m.replica()
        if replica is None:
            return
        yield from _raft_families(replica)
        view = self.m.queue_view()
        if view is not None:
            yield from _queue_families(view)
            yield from capacity_families(view.ready_by_type, m.worker_slots())
        policy = m.gc_policy()
        if policy is not None:
            yield from _gc_families(policy)
        waiting = self.m.waiting_claims()
        if waiting is not None:
            yield GaugeMetricFamily("tsched_waiting_claims",
                                    "Long-poll claims waiting at this node (the leader's hub)",
                                    value=waiting)


def _shed_family(tiers: tuple[Tier, ...], priority: dict[str, int],
                 at_node: dict[tuple[str, str], int]) -> CounterMetricFamily:
    """Submits answered 429 `overloaded` (DESIGN 14.2), by reason and tier (5.1): shed by the
    state machine for their priority (the same on every node; per task, its tier), refused
    by this node's full proposal queue (per task, its tier), or refused because this node
    had too many submits in progress (per request, its most urgent task's tier; `unknown`
    when refused before its body was read). Every series exists from the start."""
    family = CounterMetricFamily("tsched_submits_shed", "Submits refused as overloaded, by "
                                 "reason and tier", labels=["reason", "tier"])
    names = [t.name for t in tiers]
    for tier in names:
        family.add_metric(["priority", tier], priority.get(tier, 0))
    for reason, extra in (("queue_full", []), ("busy", [UNKNOWN_TIER])):
        for tier in names + extra:
            family.add_metric([reason, tier], at_node.get((reason, tier), 0))
    return family


def _gc_families(policy: GcPolicy) -> Iterator[Metric]:
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


def _raft_families(replica: Replica) -> Iterator[Metric]:
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
    applied_index = getattr(replica, "applied_index", None)
    if applied_index is not None:
        yield GaugeMetricFamily(
            "tsched_raft_apply_catch_up_waits", "Requests waiting for this node to apply "
            "entries it knew committed before it answers (a claim or head read that found "
            "nothing while the leader's apply lagged its commit)", value=applied_index.waiting)


def _replication_families(stats: ReplicationStats) -> Iterator[Metric]:
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


def _queue_families(view: QueueView) -> Iterator[Metric]:
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
    yield from _limit_families(view)
    yield GaugeMetricFamily("tsched_oldest_claimable_task_age_seconds",
                            "How long the longest-waiting due task at the head of a "
                            "(tenant, task type) queue has waited (0: none is due)",
                            value=view.oldest_claimable_age_s or 0.0)


def bounded_tenants(values: dict[str, V], rank: Callable[[V], float],
                    fold: Callable[[Iterable[V]], V],
                    limit: int = TENANT_LABELS_MAX) -> list[tuple[str, V]]:
    """(tenant, value) for the `limit` tenants ranking highest (ties by name), then the
    others folded into one (OTHER_LABEL, value), so a family has at most limit + 1 series."""
    return bounded_labels(values, rank, fold, limit)


def _live_count(counts: dict[str, int]) -> int:
    return counts.get("pending", 0) + counts.get("running", 0)


def _sum_counts(many: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in many:
        for state, n in counts.items():
            total[state] = total.get(state, 0) + n
    return total


def _limit_families(view: QueueView) -> Iterator[Metric]:
    """Keyed limits (a bounded number of labels: Limits.limits_max)."""
    in_use = GaugeMetricFamily("tsched_limit_in_use", "Running tasks holding a slot of the "
                               "keyed limit (all its partitions)", labels=["limit"])
    held = GaugeMetricFamily("tsched_limit_held_tasks", "Pending tasks a claim passed over "
                             "because the keyed limit's budget was spent (waiting for it)",
                             labels=["limit"])
    for name, (running, waiting) in view.limits.items():
        in_use.add_metric([name], running)
        held.add_metric([name], waiting)
    yield in_use
    yield held
