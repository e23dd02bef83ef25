"""Pending tasks per task type, split into those due and those not due yet: what the
`tsched_ready_tasks` gauge reads (DESIGN 14.4). Derived state, rebuilt by every restore.

The claim queue (queue.py) moves a task that came due to its band only when a claim looks
at its bucket, and deletes lazily, so its heaps cannot be counted. This keeps exact
counts instead, to the second: a pending task counts under its task type in `due` once
its run_at's second is at or before `upto_s` (the reader's clock's second: so a task due
later within the current second already counts), and before that under that second in
`later`. `advance(now_ms)` moves the seconds that came due, each once. A task's
run_at never changes while it is pending (a retry, a replay or a rate-limit pause sets
it before the task goes back to pending), so the task leaves the count it entered.

The store advances it with the state clock on every index and move, so seconds pass (and
their entries go) whether or not anyone reads; a reader advances it with its own clock.

Cost: a dict update per task entering or leaving pending; memory one entry per distinct
(task type, second) still ahead that a pending task was due at (about 150 bytes each),
none per task: an entry stays, at 0, until its second passes.
"""
from __future__ import annotations

from heapq import heappop, heappush

SECOND_MS = 1_000


class DueCounts:
    __slots__ = ("upto_s", "next_ms", "due", "later", "seconds")

    def __init__(self) -> None:
        self.upto_s = -1                              # seconds up to this one are counted due
        self.next_ms = 0                              # the next second's start: callers on the
                                                      # apply path advance only from there
        self.due: dict[str, int] = {}                 # task type -> pending tasks due
        self.later: dict[str, dict[int, int]] = {}    # task type -> second -> tasks due then
        self.seconds: list[tuple[int, str]] = []      # heap of `later`'s keys, one entry each

    def add(self, task_type: str, run_at_ms: int, delta: int) -> None:
        """A pending task of `task_type` due at `run_at_ms` enters (+1) or leaves (-1)."""
        second = run_at_ms // SECOND_MS
        if second <= self.upto_s:
            n = self.due.get(task_type, 0) + delta
            if n:
                self.due[task_type] = n
            else:
                del self.due[task_type]
            return
        by_second = self.later.get(task_type)
        if by_second is None:
            by_second = self.later[task_type] = {}
        known = by_second.get(second)
        if known is None:   # one heap entry per (second, type): kept, even at 0, until it passes
            heappush(self.seconds, (second, task_type))
            known = 0
        by_second[second] = known + delta

    def advance(self, now_ms: int) -> None:
        """Count as due what is due by `now_ms` (a reader's clock: it only moves forward)."""
        now_s = now_ms // SECOND_MS
        if now_s <= self.upto_s:
            return
        self.upto_s = now_s
        self.next_ms = (now_s + 1) * SECOND_MS
        seconds, later, due = self.seconds, self.later, self.due
        while seconds and seconds[0][0] <= now_s:
            second, task_type = heappop(seconds)
            by_second = later[task_type]
            n = by_second.pop(second)
            if n:
                due[task_type] = due.get(task_type, 0) + n
            if not by_second:
                del later[task_type]
