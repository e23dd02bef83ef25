"""Keyed rate and concurrency limits, enforced when a task is claimed (issue 46).

A *limit* (`LimitDef`) has a name and a sliding-window rate (at most `rate` claims in any
window of `per_ms`) and/or a `concurrency` (at most that many of its tasks running at
once), optionally per *partition*: `partition_by` is "tenant" or a top-level field of the
task's payload, and each value of it has its own budget (`Partition`). A task names its
limits at submit (`Task.limits`); a claim grants it only while every one of them has
budget, with the claim's time, so every replica agrees.

Replicated here: the definitions, and per partition the running tasks that hold a slot
(by id, so a deleted and re-created limit never double-counts), the window of claim start
times, and a pause (`paused_until_ms`, from a worker's RateLimited report). Derived: which
pending tasks are *held* (popped by a claim while their budget was spent), the wake heap
(when a spent rate window or a pause frees), and the partitions opened since (a budget
that may have grown). A restore holds nothing: every pending task is in the claim queue
again and the next claims hold what is still blocked, so claims decide alike either way
(a claim grants the eligible tasks in claim order; being held only saves work).

Held tasks wait per partition, in one heap per claim-queue bucket (task type, tenant),
in claim order. When a partition's budget may have grown (a slot freed, a window edge
passed, a pause ended, the limit changed) it is *opened*; the next claim or tick releases
up to its available budget from each of its heaps back to the claim queue, best first.
So a claim never walks held tasks, and each held task costs O(log n) per hold.

Limited tasks are not handed out early (a claim's prefetch): a rate window counts claim
start times, which then arrive in order, so the sliding-window check is one comparison.
"""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from .model import PENDING, Task
from .rules import static_key

if TYPE_CHECKING:
    from .limits import Limits
    from .queue import ClaimQueue

UNBOUNDED = 1 << 62   # the budget of a bound a limit does not set
MISSING = ""          # the partition of a task whose payload lacks the field
OVERFLOW = "\0overflow"   # where a task waits while its limit has no room for its partition


class LimitDef:
    """A declared limit. `rate`/`concurrency` 0: not set (a limit sets at least one)."""

    __slots__ = ("name", "rate", "per_ms", "concurrency", "partition_by", "created_at_ms",
                 "updated_at_ms")

    def __init__(self, name: str, rate: int, per_ms: int, concurrency: int,
                 partition_by: str | None, created_at_ms: int, updated_at_ms: int) -> None:
        self.name = name
        self.rate = rate
        self.per_ms = per_ms
        self.concurrency = concurrency
        self.partition_by = partition_by
        self.created_at_ms = created_at_ms
        self.updated_at_ms = updated_at_ms

    def record(self) -> list:
        return [self.name, self.rate, self.per_ms, self.concurrency, self.partition_by,
                self.created_at_ms, self.updated_at_ms]

    def __repr__(self) -> str:
        return (f"LimitDef({self.name!r}, rate={self.rate}/{self.per_ms}ms, "
                f"concurrency={self.concurrency}, partition_by={self.partition_by!r})")


class Partition:
    """One partition's budget: running task ids (a dict: ordered, no sets in apply), the
    ascending start times of the current window, a pause; and, derived, its held tasks
    in one heap per (task type, tenant), and when it is next worth a look (`wake_at`)."""

    __slots__ = ("key", "running", "window", "paused_until_ms", "held", "wake_at")

    def __init__(self, key: str) -> None:
        self.key = key
        self.running: dict[str, None] = {}
        self.window: deque[int] = deque()
        self.paused_until_ms = 0
        self.held: dict[tuple[str, str], list[tuple]] = {}
        self.wake_at: int | None = None

    def trim(self, defn: LimitDef, now_ms: int) -> None:
        """Forget starts that left the window (now - per_ms, now]."""
        edge = now_ms - defn.per_ms
        window = self.window
        while window and window[0] <= edge:
            window.popleft()

    def available(self, defn: LimitDef, now_ms: int) -> int:
        """Claims this partition allows now (0 while paused or spent)."""
        if self.paused_until_ms > now_ms:
            return 0
        left = UNBOUNDED
        if defn.concurrency:
            left = defn.concurrency - len(self.running)
        if defn.rate:
            self.trim(defn, now_ms)
            left = min(left, defn.rate - len(self.window))
        return max(0, left)

    def free_at(self, defn: LimitDef, now_ms: int) -> int | None:
        """When the budget frees by time alone (pause end, window edge); None: it waits
        for a running task to end (or is not spent)."""
        if self.paused_until_ms > now_ms:
            return self.paused_until_ms
        if defn.rate and len(self.window) >= defn.rate:
            return self.window[len(self.window) - defn.rate] + defn.per_ms
        return None

    def grows_at(self, defn: LimitDef, now_ms: int) -> int | None:
        """The next instant the budget grows by time alone: a pause's end, or the oldest
        start leaving the window (None: only a running task's end can grow it)."""
        if self.paused_until_ms > now_ms:
            return self.paused_until_ms
        if defn.rate:
            self.trim(defn, now_ms)
            if self.window:
                return self.window[0] + defn.per_ms
        return None

    def idle(self, defn: LimitDef, now_ms: int) -> bool:
        if self.running or self.held or self.paused_until_ms > now_ms:
            return False
        self.trim(defn, now_ms)
        return not self.window


def partition_key(defn: LimitDef, task: Task) -> str:
    """The task's partition of `defn`: its tenant, the canonical text of a payload field
    (a string as itself; a dotted path reaches into objects: `kwargs.account_id` for an
    App task called with keywords), or MISSING; "" too for an unpartitioned limit."""
    by = defn.partition_by
    if by is None:
        return ""
    if by == "tenant":
        return task.tenant
    try:
        payload = json.loads(task.payload_json)
    except ValueError:
        return MISSING
    value = payload
    for name in by.split("."):
        if not isinstance(value, dict) or name not in value:
            return MISSING
        value = value[name]
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class Limiter:
    """The limits of one state machine: definitions, partitions, held tasks."""

    def __init__(self, limits: Limits, queue: ClaimQueue) -> None:
        self.bounds = limits
        self.queue = queue
        self.defs: dict[str, LimitDef] = {}
        self.parts: dict[str, dict[str, Partition]] = {}
        self.wakes: list[tuple[int, str, str]] = []       # (at_ms, limit, key), derived
        self.opened: dict[tuple[str, str], None] = {}     # budgets that may have grown
        self.held_of: dict[str, tuple[str, str]] = {}     # task id -> (limit, key)
        self.overflow: dict[str, list[Task]] = {}         # waiting for a partition's room
        self.holds = 0                                    # tasks held so far (a counter)
        self.held_by_type: dict[str, int] = {}            # held tasks per task type, derived
        self.limited: dict[str, Task] = {}                # every task naming a limit

    # --- the claim path -------------------------------------------------------------------
    def blocker(self, task: Task, now_ms: int) -> tuple[str, str] | None:
        """The first of the task's limits without budget, as (limit, key), or None. A
        limit that no longer exists binds nothing; a partition the limit has no room for
        (`limit_partitions_max`, `_room`) is (limit, OVERFLOW)."""
        for name, defn, key in self._keyed(task):
            part = self.parts[name].get(key)
            if part is None:
                if not self._room(name, now_ms):
                    return (name, OVERFLOW)
                continue   # a fresh partition has its whole budget
            elif part.available(defn, now_ms) <= 0:
                return (name, key)
        return None

    def _keyed(self, task: Task) -> Iterator[tuple[str, LimitDef, str]]:
        """(name, definition, partition key) of each limit `task` names that exists (a
        limit since deleted binds nothing)."""
        for name in task.limits:
            defn = self.defs.get(name)
            if defn is not None:
                yield name, defn, partition_key(defn, task)

    def _room(self, name: str, now_ms: int) -> bool:
        """Room for one more partition of `name`, forgetting idle ones when full."""
        parts = self.parts[name]
        if len(parts) < self.bounds.limit_partitions_max:
            return True
        defn = self.defs[name]
        for key in [k for k, p in parts.items() if p.idle(defn, now_ms)]:
            del parts[key]
            self.opened[(name, OVERFLOW)] = None
        return len(parts) < self.bounds.limit_partitions_max

    def granted(self, task: Task, start_ms: int) -> None:
        """A claim granted `task` (its limits all had budget): take a slot of each."""
        for name, defn, key in self._keyed(task):
            part = self._part(name, key)
            if defn.concurrency:
                part.running[task.task_id] = None
            if defn.rate:
                part.window.append(start_ms)
                if part.held:   # this start may spend the window: watch when it frees
                    self._watch_free(name, part, defn, start_ms)

    def hold(self, task: Task, where: tuple[str, str], now_ms: int) -> None:
        """Park a popped task under its spent partition; the claim queue's entries of it
        die (its qver moves on), the held entry carries the new one."""
        task.qver += 1
        self.holds += 1
        self._count_held(task, 1)
        name, key = where
        if key == OVERFLOW:
            self.overflow.setdefault(name, []).append(task)
            self.held_of[task.task_id] = where
            return
        part = self.parts[name][key]
        entry = (static_key(task.priority, task.run_at_ms, self.queue.aging_ms),
                 task.run_at_ms, task.seq, task.qver, task)
        heap = part.held.get((task.task_type, task.tenant))
        if heap is None:
            heap = part.held[(task.task_type, task.tenant)] = []
        heappush(heap, entry)
        self.held_of[task.task_id] = where
        self._watch_free(name, part, self.defs[name], now_ms)
        for other, _, other_key in self._keyed(task):   # budgets it did not use: another
            if other != name:                             # task may use them
                self.opened[(other, other_key)] = None

    def ended(self, task: Task) -> None:
        """`task` stopped running: its slots free, so its partitions may release."""
        for name, _, key in self._keyed(task):
            part = self.parts[name].get(key)
            if part is not None and part.running.pop(task.task_id, 0) is None:
                self.opened[(name, key)] = None

    def left_pending(self, task: Task) -> None:
        """A pending task left pending without a claim (cancelled): if it was released but
        unclaimed, the budget it was released for can go to another."""
        if self.held_of.pop(task.task_id, None) is None:
            for name, _, key in self._keyed(task):
                self.opened[(name, key)] = None
        else:
            self._count_held(task, -1)

    def _count_held(self, task: Task, delta: int) -> None:
        n = self.held_by_type.get(task.task_type, 0) + delta
        if n:
            self.held_by_type[task.task_type] = n
        else:
            del self.held_by_type[task.task_type]

    # --- releasing ------------------------------------------------------------------------
    def settle(self, now_ms: int) -> None:
        """After each batch: release what its commands (a completion, a pause, a new
        limit) or the clock freed, so that claim waiters see it at once."""
        if self.opened or (self.wakes and self.wakes[0][0] <= now_ms):
            self.wake(now_ms)

    def wake(self, now_ms: int) -> bool:
        """Before a claim or on a tick: open the partitions whose time came, release the
        opened ones. True if any task went back to the claim queue."""
        wakes = self.wakes
        while wakes and wakes[0][0] <= now_ms:
            at, name, key = heappop(wakes)
            part = self.parts.get(name, {}).get(key)
            if part is not None and part.wake_at == at:
                part.wake_at = None
                self.opened[(name, key)] = None
        released = False
        while self.opened:
            (name, key), _ = self.opened.popitem()   # newest first: order is immaterial
            released |= self._release(name, key, now_ms)
        return released

    def _release(self, name: str, key: str, now_ms: int) -> bool:
        if key == OVERFLOW:
            return self._let_in(name, now_ms)
        defn = self.defs.get(name)
        part = self.parts.get(name, {}).get(key) if defn is not None else None
        if defn is None or part is None:
            return False
        budget = part.available(defn, now_ms)
        moved = False
        for bucket in list(part.held):
            heap = part.held[bucket]
            left = budget
            while heap and left > 0:
                entry = heappop(heap)
                if _held_live(entry):   # else released, claimed or cancelled meanwhile
                    left -= 1
                    moved = True
                    self._requeue(entry[-1], now_ms)
            while heap and not _held_live(heap[0]):
                heappop(heap)
            if not heap:
                del part.held[bucket]
        self._settle(name, part, defn, now_ms)
        return moved

    def _requeue(self, task: Task, now_ms: int) -> None:
        del self.held_of[task.task_id]
        self._count_held(task, -1)
        self.queue.push(task, now_ms)

    def _settle(self, name: str, part: Partition, defn: LimitDef, now_ms: int) -> None:
        """After a change: forget an idle partition (and let overflow in), or, while it
        holds tasks, watch the instant its budget frees by time. (A partition idle but for
        its window is forgotten when next looked at, or by `_room`: no timer for it.)"""
        if part.idle(defn, now_ms):
            del self.parts[name][part.key]
            if name in self.overflow:
                self.opened[(name, OVERFLOW)] = None
            return
        if part.held:
            self._watch_free(name, part, defn, now_ms)

    def _watch_free(self, name: str, part: Partition, defn: LimitDef, now_ms: int) -> None:
        """While tasks wait in `part`: wake whenever its budget grows by time (each start
        leaving the window, a pause ending), so that no held task waits on budget nobody
        looks at; a running task's end opens it (`ended`)."""
        grows = part.grows_at(defn, now_ms)
        if grows is not None:
            self._watch(name, part, grows)

    def _watch(self, name: str, part: Partition, at_ms: int) -> None:
        if part.wake_at is None or at_ms < part.wake_at:
            part.wake_at = at_ms
            heappush(self.wakes, (at_ms, name, part.key))

    def _part(self, name: str, key: str) -> Partition:
        parts = self.parts[name]
        part = parts.get(key)
        if part is None:
            part = parts[key] = Partition(key)
        return part

    def next_wake_ms(self) -> int | None:
        while self.wakes:
            at, name, key = self.wakes[0]
            part = self.parts.get(name, {}).get(key)
            if part is not None and part.wake_at == at:
                return at
            heappop(self.wakes)
        return None

    def pause(self, defn: LimitDef, key: str, until_ms: int) -> None:
        """A RateLimited report: the partition claims nothing until `until_ms`."""
        part = self._part(defn.name, key)
        part.paused_until_ms = max(part.paused_until_ms, until_ms)
        if part.held:
            self._watch(defn.name, part, part.paused_until_ms)

    # --- definitions ----------------------------------------------------------------------
    def put(self, defn: LimitDef) -> None:
        """A new or changed limit: every partition may have more budget now."""
        self.defs[defn.name] = defn
        parts = self.parts.setdefault(defn.name, {})
        for key in parts:
            self.opened[(defn.name, key)] = None

    def delete(self, name: str, now_ms: int) -> None:
        """Its held tasks go back to the claim queue; tasks naming it are unbound."""
        del self.defs[name]
        for part in self.parts.pop(name, {}).values():
            for heap in part.held.values():
                for entry in sorted(heap):
                    if _held_live(entry):
                        self._requeue(entry[-1], now_ms)
        self._let_in(name, now_ms)

    def _let_in(self, name: str, now_ms: int) -> bool:
        """The tasks that waited for room in `name`'s partition table try again (rare:
        the table holds `limit_partitions_max` busy partitions)."""
        moved = False
        for task in self.overflow.pop(name, []):
            if task.state == PENDING and self.held_of.get(task.task_id) == (name, OVERFLOW):
                self._requeue(task, now_ms)
                moved = True
        return moved

    # --- reads ------------------------------------------------------------------------------
    def limited_by(self, task: Task, now_ms: int) -> tuple[str, str, int | None] | None:
        """Why a held pending task waits: (limit, partition, earliest ms or None: when a
        running task of it ends)."""
        where = self.held_of.get(task.task_id)
        if where is None or task.state != PENDING:
            return None
        name, key = where
        part = self.parts.get(name, {}).get(key)
        defn = self.defs.get(name)
        if part is None or defn is None:
            return (name, key, None)
        return (name, key, part.free_at(defn, now_ms))

    def usage(self, name: str, now_ms: int) -> tuple[int, int, list[tuple[str, int, int, int]]]:
        """(in use, held, partitions as (key, running, window count, held) busiest first)."""
        defn = self.defs[name]
        rows = []
        for key, part in self.parts.get(name, {}).items():
            part.trim(defn, now_ms)
            held = sum(len(h) for h in part.held.values())
            rows.append((key, len(part.running), len(part.window), held))
        rows.sort(key=lambda r: (-(r[1] + r[2] + r[3]), r[0]))
        in_use = sum(r[1] for r in rows)
        held = sum(r[3] for r in rows) + len(self.overflow.get(name, ()))
        return in_use, held, rows

    # --- snapshots ------------------------------------------------------------------------
    def records(self, now_ms: int) -> list:
        """Canonical: definitions by name, each with its busy partitions by key (running
        ids, the current window, the pause); idle partitions are not state."""
        out = []
        for name in sorted(self.defs):
            defn = self.defs[name]
            parts = []
            for key in sorted(self.parts.get(name, {})):
                part = self.parts[name][key]
                part.trim(defn, now_ms)
                paused = part.paused_until_ms if part.paused_until_ms > now_ms else 0
                if part.running or part.window or paused:
                    parts.append([key, list(part.running), list(part.window), paused])
            out.append([defn.record(), parts])
        return out

    def task_limits(self) -> list:
        """[[task id, [limit names]], ...] by task id: what a snapshot keeps of tasks'
        limits (beside the task rows, whose stored layout stays as it was)."""
        return [[tid, list(self.limited[tid].limits)] for tid in sorted(self.limited)]

    def restore(self, records: Any, now_ms: int) -> None:
        for rec, parts in records:
            defn = LimitDef(*rec)
            self.defs[defn.name] = defn
            table = self.parts[defn.name] = {}
            for key, running, window, paused in parts:
                part = table[key] = Partition(key)
                part.running = dict.fromkeys(running)
                part.window = deque(window)
                part.paused_until_ms = paused
                self._settle(defn.name, part, defn, now_ms)


def _held_live(entry: tuple) -> bool:
    task = entry[-1]
    return task.state == PENDING and task.qver == entry[-2]

