"""The workers' slots, busy and idle, as their claims and heartbeats report them: the
`tsched_worker_slots` gauge that autoscaling reads (DESIGN 14.4). Advisory, in memory at
the leader, not replicated, like claimed_types.py.

A report is the worker's whole figure at that moment (its total slots and the busy ones by
task type), so the latest one replaces the one before. A worker that stops reporting (it
stopped, died or lost its network) falls out once its last report is TTL_S old: a Worker
claims at least every long poll (20 s) while it has a free slot and heartbeats at least
every 20 s while it runs a task, so a live worker's report is never that old. At most
WORKERS_MAX workers are kept; past that the longest silent goes first. Times are the
caller's monotonic seconds."""
from __future__ import annotations

from typing import NamedTuple

TTL_S = 60.0           # a report counts this long after it came
WORKERS_MAX = 10_000   # workers remembered


class SlotReport(NamedTuple):
    """A worker's slots: `total`, and `busy` as (task type, slots running it), each type
    once, their sum at most `total`."""

    total: int
    busy: tuple[tuple[str, int], ...] = ()

    @property
    def idle(self) -> int:
        return self.total - sum(n for _, n in self.busy)


class WorkerSlots:
    def __init__(self, ttl_s: float = TTL_S, workers_max: int = WORKERS_MAX) -> None:
        self.ttl_s = ttl_s
        self._workers_max = workers_max
        # worker id -> (when, its task types, its report); oldest report first
        self._reports: dict[str, tuple[float, tuple[str, ...], SlotReport]] = {}

    def report(self, worker_id: str, task_types: tuple[str, ...], slots: SlotReport,
               now_s: float) -> None:
        reports = self._reports
        reports.pop(worker_id, None)   # re-inserted last: the dict stays oldest first
        reports[worker_id] = (now_s, task_types, slots)
        while len(reports) > self._workers_max:
            del reports[next(iter(reports))]

    def figures(self, now_s: float) -> dict[str, tuple[int, int]]:
        """Task type -> (busy slots, idle slots) over the workers heard from within the
        TTL. A worker's idle slots count under every type it serves (any of them may take
        them); its busy ones under the type they run."""
        reports = self._reports
        horizon = now_s - self.ttl_s
        while reports and next(iter(reports.values()))[0] <= horizon:
            del reports[next(iter(reports))]
        out: dict[str, tuple[int, int]] = {}
        for _, task_types, slots in reports.values():
            busy = dict(slots.busy)
            idle = slots.idle
            for task_type in task_types:
                b, i = out.get(task_type, (0, 0))
                out[task_type] = (b + busy.get(task_type, 0), i + idle)
        return out

    def __len__(self) -> int:
        return len(self._reports)
