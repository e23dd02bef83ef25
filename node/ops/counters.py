"""Counters and histograms with one writer, the Raft thread: plain ints bumped as commands
apply and turned into Prometheus families when a scrape reads them (metrics.py), so an
apply costs attribute increments rather than a lock and a prometheus_client call.
Also the bound on label values every family of the node keeps to."""
from __future__ import annotations

import bisect
from typing import Iterable

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from tsched.statemachine.tiers import DEFAULT_TIERS, PRIORITY_MAX, PRIORITY_MIN, Tier, tier_of

# Label cardinality is bounded, whatever the clients send (DESIGN 14.4). The per-tenant
# gauges show the tenants that matter most (deepest queue, longest wait) and fold the rest
# into OTHER_LABEL; the run-duration histogram has a series for the first task types this
# node sees and folds later ones. No tenant can be named OTHER_LABEL (tenant names are
# [A-Za-z0-9_.-]); a task type of that name shares the folded series.
OTHER_LABEL = "(other)"
TENANT_LABELS_MAX = 100
TASK_TYPE_LABELS_MAX = 100
# The tier of a submit refused before its body was read (tsched_submits_shed_total).
UNKNOWN_TIER = "unknown"


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
                    "Attempts ended by an expired lease, the task's timeout or the "
                    "expiry of their worker's session"),
        "sessions_expired": ("tsched_worker_sessions_expired",
                             "Worker sessions ended because the leader did not hear from "
                             "the worker for its session timeout (its tasks given back)"),
        "retried": ("tsched_retried_tasks",
                    "Failed or expired attempts whose task went back to pending"),
        "dead": ("tsched_dead_lettered_tasks", "Tasks moved to dead_letter"),
        "cancelled": ("tsched_cancelled_tasks", "Tasks that became cancelled"),
        "replayed": ("tsched_replayed_tasks", "Dead letters replayed"),
        "leader_changes": ("tsched_raft_leader_changes",
                           "Leaders seen taking office (their first barrier applied here)"),
    }
    __slots__ = tuple(FAMILIES)
    # The slots, for readers and type checkers (each set to 0 by __init__).
    submitted: int
    claimed: int
    completed: int
    failed: int
    expired: int
    sessions_expired: int
    retried: int
    dead: int
    cancelled: int
    replayed: int
    leader_changes: int

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


class TierHistograms:
    """The lateness histogram with a `tier` label (DESIGN 5.1): one BucketHistogram per tier
    of the cluster's table, made once, and a list from effective priority (0..10) to its
    tier's histogram, so an observation on the Raft thread costs an index and a bisect.
    Every tier has its series from the start (zero until a task of it is claimed)."""

    def __init__(self, name: str, doc: str, bounds: tuple,
                 tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> None:
        self.name, self.doc, self.bounds = name, doc, tuple(bounds)
        self.by_tier = {t.name: BucketHistogram(name, doc, self.bounds) for t in tiers}
        self.of_priority = [self.by_tier[tier_of(p, tiers).name]
                            for p in range(PRIORITY_MIN, PRIORITY_MAX + 1)]

    def observe(self, value: float, priority: int) -> None:
        """`priority` is the task's effective priority (clamped to 0..10)."""
        self.of_priority[min(max(priority, PRIORITY_MIN), PRIORITY_MAX)].observe(value)

    @property
    def counts(self) -> list[int]:
        """Per-bucket counts (not cumulative) over every tier; the last one is +Inf."""
        return [sum(column) for column in zip(*(h.counts for h in self.by_tier.values()))]

    @property
    def count(self) -> int:
        return sum(h.count for h in self.by_tier.values())

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=["tier"])
        for tier, histogram in self.by_tier.items():
            family.add_metric([tier], histogram.buckets(), histogram.sum)
        return family
