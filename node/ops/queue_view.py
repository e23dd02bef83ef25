"""The queue as metrics and the dashboard see it: counts by state, priority and tenant
from `sm.stats()`, and how long the due tasks at the head of each queue have waited.
Read under the replica lock, at scrape time (metrics.py) or for the dashboard."""
from __future__ import annotations

from dataclasses import dataclass, field

from tsched.statemachine.machine import StateMachine

STATES = ("pending", "running", "completed", "cancelled", "dead_letter", "discarded")
PRIORITIES = tuple(range(11))


@dataclass
class QueueView:
    """`sm.stats()` in the shape metrics and the dashboard use."""

    by_state: dict[str, int] = field(default_factory=dict)
    by_priority: dict[int, int] = field(default_factory=dict)       # pending tasks
    by_tenant: dict[str, dict[str, int]] = field(default_factory=dict)   # pending, running
    oldest_claimable_age_s: float | None = None                     # None: nothing is due
    schedules: int = 0
    oldest_due_age_s_by_tenant: dict[str, float] = field(default_factory=dict)  # due ones only
    # keyed limits (at most Limits.limits_max): name -> (running tasks holding a slot,
    # pending tasks held waiting for its budget)
    limits: dict[str, tuple[int, int]] = field(default_factory=dict)
    # pending tasks a claim could take now, by task type (tsched_ready_tasks)
    ready_by_type: dict[str, int] = field(default_factory=dict)


def queue_view(sm: StateMachine, now_ms: int) -> QueueView:
    """Counts from `sm.stats()` plus the lag; the caller holds the replica lock."""
    stats = sm.stats()
    by_state = {s: int(stats["tasks_by_state"].get(s, 0)) for s in STATES}
    by_priority = {int(p): int(n) for p, n in stats["pending_by_priority"].items()}
    by_tenant = {t: {"pending": int(v["pending"]), "running": int(v["running"])}
                 for t, v in sorted(stats["tenants"].items())}
    oldest = _oldest_due_ms(sm, now_ms) if by_state["pending"] else {}
    ages = {t: (now_ms - at) / 1000 for t, at in sorted(oldest.items())}
    age = max(ages.values()) if ages else None
    limiter = sm.store.limiter
    limits = {}
    for name in sorted(limiter.defs):
        in_use, held, _ = limiter.usage(name, sm.now_ms)
        limits[name] = (in_use, held)
    return QueueView(by_state, by_priority, by_tenant, age, int(stats.get("schedules", 0)),
                     ages, limits, sm.ready_by_type(now_ms))


def _oldest_due_ms(sm: StateMachine, now_ms: int) -> dict[str, int]:
    """Per tenant, the earliest run_at among the due tasks at the head of each of its
    (tenant, task type) queues: how long the tenant's next task has waited for a worker.

    Exact within a priority (FIFO); a lower-priority task may wait longer than the heads
    until aging lifts it. O(queues), never a scan of the pending tasks. The state machine
    has no public read for this (`next_due_ms` clamps due tasks to now), so it peeks at
    the claim queue's heap tops, read-only; if their layout changes the gauge goes empty
    rather than failing the scrape. Tenants with nothing due are absent, and so are paused
    queues' tasks (statemachine/pauses.py): they wait because an operator said so.
    """
    try:
        best: dict[str, int] = {}
        queue = sm._queue
        for task_type, buckets in queue.by_type.items():
            for tenant, bucket in buckets.items():
                if queue.is_paused(task_type, tenant):
                    continue     # paused (issue 48): waiting on purpose, not late
                heads = [bucket.ready[0][1]] if bucket.ready else []
                if bucket.delayed and bucket.delayed[0][0] <= now_ms:
                    heads.append(bucket.delayed[0][0])   # due, not yet promoted
                for at in heads:
                    if at <= now_ms and at < best.get(tenant, at + 1):
                        best[tenant] = at
        return best
    except (AttributeError, IndexError, TypeError):
        return {}
