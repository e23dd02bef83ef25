"""Paused queues (issue 48): stop claiming a task type, a tenant's tasks, or both, for a while
(a partner bank down for maintenance), and resume.

A pause names a *selector*: a task type, a tenant, or both (at least one). While it stands,
no claim takes a pending task it covers; the tasks stay pending, their schedules still fire
and submits are still accepted, and resuming lets them run in their claim order (their
`run_at` and aging are untouched). A running task is not stopped: the pause acts at claim
time. Replicated: the pauses themselves (selector, when, who, why), in the snapshot, the
state digest, backups and re-sharding; nothing else.

Cost: the claim queue keeps pending tasks in one bucket per (task type, tenant) (queue.py),
which is exactly the grain of a selector. The claim queue holds a reference to `by_key`
and leaves out a paused bucket when it gathers a claim's buckets (`ClaimQueue._buckets`):
one or two dict lookups per bucket a claim looks at, never a walk of paused tasks, and
nothing at all while no pause stands. Every claim path (plain, by range, by tier weights,
a shard's head, `has_claimable`, `next_due_ms` for the timer) gathers its buckets there,
so none of them sees paused work; the lateness gauges skip paused buckets too
(node/ops/queue_view.py).

Keys: (task_type, tenant) with "" for the part a selector leaves open (a task type and a
tenant are never empty), so the three kinds of pause are three dict lookups.
"""
from __future__ import annotations

from typing import Any

from .model import Task

ANY = ""   # the open part of a selector


class Pause:
    """One standing pause: its selector (None: any), since when, who and why."""

    __slots__ = ("task_type", "tenant", "paused_at_ms", "actor", "reason")

    def __init__(self, task_type: str | None, tenant: str | None, paused_at_ms: int,
                 actor: str | None, reason: str | None) -> None:
        self.task_type = task_type
        self.tenant = tenant
        self.paused_at_ms = paused_at_ms
        self.actor = actor
        self.reason = reason

    @property
    def key(self) -> tuple[str, str]:
        return (self.task_type or ANY, self.tenant or ANY)

    def record(self) -> list:
        return [self.task_type, self.tenant, self.paused_at_ms, self.actor, self.reason]

    def __repr__(self) -> str:
        return f"Pause({self.task_type!r}, {self.tenant!r}, at={self.paused_at_ms})"


def selector_text(task_type: str | None, tenant: str | None) -> str:
    """How an audit entry names a selector: `task_type=T`, `tenant=N` or both."""
    parts = []
    if task_type is not None:
        parts.append(f"task_type={task_type}")
    if tenant is not None:
        parts.append(f"tenant={tenant}")
    return ",".join(parts)


class Pauses:
    """The standing pauses of one state machine, by key (an insertion-ordered dict; reads
    and records sort it)."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Pause] = {}

    def __len__(self) -> int:
        return len(self.by_key)

    def covering(self, task_type: str, tenant: str) -> Pause | None:
        """The pause that holds a task of this type and tenant (the most specific one
        first), or None."""
        by_key = self.by_key
        if not by_key:
            return None
        return (by_key.get((task_type, tenant)) or by_key.get((task_type, ANY))
                or by_key.get((ANY, tenant)))

    def of_task(self, task: Task) -> Pause | None:
        return self.covering(task.task_type, task.tenant)

    def listing(self, tenant: str | None = None) -> list[Pause]:
        """Every pause in key order; with `tenant`, those that cover some of its tasks."""
        keys = sorted(self.by_key)
        if tenant is not None:
            keys = [k for k in keys if k[1] in (ANY, tenant)]
        return [self.by_key[k] for k in keys]

    def records(self) -> list:
        """Canonical: by key."""
        return [self.by_key[k].record() for k in sorted(self.by_key)]

    def restore(self, records: Any) -> None:
        for rec in records or ():
            task_type, tenant, at_ms, actor, reason = rec
            if not (isinstance(task_type, (str, type(None))) and isinstance(
                    tenant, (str, type(None))) and type(at_ms) is int) or (
                    task_type is None and tenant is None):
                raise ValueError("a pause record is [task_type, tenant, at_ms, actor, reason]")
            pause = Pause(task_type, tenant, at_ms, actor, reason)
            self.by_key[pause.key] = pause
