"""StateMachine: applies commands to the replicated task state (DESIGN section 5).

`apply` checks the envelope (request_id, now_ms), advances the clock, answers a repeated
request_id from the request table, and otherwise runs the command's handler. A handler
validates everything first and raises `Rejected` before it changes anything; it returns a
small *record* of its result, which is stored in the request table and rendered into a
`Result` (so a first answer and a repeated one come from the same code).

Replicated state: tasks, tenants, schedules, the request table and four counters (seq,
now_ms, cluster_token, task_seq). Everything else (claim queue, listing indexes, expiry
heaps, idempotency map, the digest's bookkeeping) is derived and rebuilt by `restore`.

Digest marks: every change to a task, tenant or schedule goes through a place that marks
it for the incremental digest (digest.py): `_find`, `_add_task`, `_remove_task`, `_move`,
`_grant`, `_end_attempt` for tasks; `_tenant` and `_grant` for tenants; `_schedule` and
`_put_schedule` for schedules; `_remember` counts request-table evictions.
"""
from __future__ import annotations

import gc
import sys
from collections import OrderedDict
from heapq import heapify, heappop, heappush
from itertools import repeat

from . import codec
from . import commands as c
from . import validate as V
from .digest import UNHASHED, StateDigest, full_hexdigest, item_hash
from .errors import (CONFLICT, INVALID_ARGUMENT, INVALID_STATE, NOT_FOUND, OK, STALE_TOKEN,
                     TENANT_LIMIT, Result)
from .limits import Limits
from .listing import SeqIndex
from .model import (COMPLETED, ILLEGAL, LIVE, PENDING, REMOVED, RUNNING, STATES, TERMINAL,
                    Attempt, FireRecord, Schedule, Task, TenantView, transition)
from .queue import ClaimQueue
from .rules import backoff_ms, fire_jitter_ms, occurrence_task_id
from .validate import Rejected

CURSOR_CHARS_MAX = 300
# Digest changes left unfolded (digest.py): tasks changed since they were last hashed, the
# oldest beyond this window folded at the end of each batch. A wide window hashes a task
# once for its submit, claim and completion (bench: 2.25 -> ~1 hash per task at a 5,000-task
# backlog); `digest()` folds what is left, and the node does that in slices (raft.py).
DIGEST_DIRTY_MAX = 16_384
DIGEST_REQUESTS_UNFOLDED_MAX = 4_096   # request-table entries (each is hashed once anyway)

# A record: (code, message, details | None, kind | None, data). See `_render`.
_NONE = (OK, "", None, None, None)


def _task_rec(task: Task, duplicate: bool | None = None) -> tuple:
    return (OK, "", None, "task", [task.task_id, duplicate])


def _schedule_rec(s: Schedule) -> tuple:
    return (OK, "", None, "schedule", [s.tenant, s.schedule_id])


def _fire_rec(s: Schedule, task: Task | None) -> tuple:
    return (OK, "", None, "fire", [s.tenant, s.schedule_id, task.task_id if task else None])


class StateMachine:
    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        # replicated
        self.seq = 0
        self.now_ms = 0
        self.cluster_token = 0
        self.task_seq = 0
        self.tasks: dict[str, Task] = {}
        self.tenants: dict[str, TenantView] = {}
        self.schedules: dict[tuple[str, str], Schedule] = {}
        # OrderedDict: popping a plain dict's oldest key is O(deleted keys) until it resizes
        self.requests: OrderedDict[str, tuple] = OrderedDict()
        # derived
        self._queue = ClaimQueue(self.limits.aging_interval_ms)
        self._all = SeqIndex()
        self._by_state = {s: SeqIndex() for s in STATES}
        self._by_tenant: dict[str, SeqIndex] = {}
        self._idem: dict[tuple[str, str], Task] = {}
        self._leases: list[tuple] = []     # (deadline_ms, token, n, task)
        self._terminal: list[tuple] = []   # (completed_at_ms, seq, n, task)
        self._fires: list[tuple] = []      # (next_fire_ms, tenant, schedule_id)
        self._occurrences: dict[tuple[str, str], dict[str, Task]] = {}
        self._schedules_per_tenant: dict[str, int] = {}
        self._pending_by_priority = [0] * (self.limits.priority_max + 1)
        self._live = 0
        self._terminal_count = 0
        self._n = 0
        self._digest = StateDigest(self)
        self._handlers = {
            c.SubmitTask: self._submit, c.Claim: self._claim, c.Heartbeat: self._heartbeat,
            c.Complete: self._complete, c.Fail: self._fail, c.Release: self._release,
            c.Cancel: self._cancel, c.Replay: self._replay, c.Discard: self._discard,
            c.SetTenant: self._set_tenant, c.PutSchedule: self._put_schedule,
            c.DeleteSchedule: self._delete_schedule, c.PauseSchedule: self._pause_schedule,
            c.ResumeSchedule: self._resume_schedule, c.Fire: self._fire,
            c.Tick: self._tick, c.Barrier: lambda cmd: _NONE,
        }

    # ======================================================================================
    # applying commands
    # ======================================================================================
    def apply_batch(self, cmds) -> list[Result]:
        apply = self._apply_untidy
        results = [apply(cmd) for cmd in cmds] if isinstance(cmds, (list, tuple)) else []
        # Handlers check the liveness of every heap entry they use, so only readers need
        # live tops: tidying once per batch does the same pops for less.
        self._tidy()
        self.seq += 1
        self._fold_now_and_then()
        return results

    def apply(self, cmd) -> Result:
        result = self._apply_untidy(cmd)
        self._tidy()
        return result

    def _apply_untidy(self, cmd) -> Result:
        handler = self._handlers.get(type(cmd))
        if handler is None:
            return Result(INVALID_ARGUMENT, "not a command", None, {})
        try:
            V.envelope(cmd, self.limits)
        except Rejected as r:
            return Result(r.code, r.message, None, r.details)
        self.now_ms = max(self.now_ms, cmd.now_ms)
        unrecorded = type(cmd) in (c.Tick, c.Barrier)   # repeating them is harmless
        if not unrecorded:
            rec = self.requests.get(cmd.request_id)
            if rec is not None:
                return self._render(rec)
        try:
            rec = handler(cmd)
        except Rejected as r:
            rec = (r.code, r.message, r.details or None, None, None)
        if not unrecorded:
            self._remember(cmd.request_id, rec)
        return self._render(rec)

    def _remember(self, request_id: str, rec: tuple) -> None:
        self.requests[request_id] = rec
        if len(self.requests) > self.limits.requests_max:
            self.requests.popitem(last=False)   # FIFO: oldest first
            self._digest.requests.evicted()

    def _render(self, rec) -> Result:
        code, message, details, kind, data = rec
        if code != OK:
            return Result(code, message, None, dict(details or {}))
        if kind is None:
            return Result(OK, "", None, {})
        if kind == "task":
            task = self.tasks.get(data[0])
            if task is None:
                return Result(NOT_FOUND, f"task {data[0]} is no longer retained", None,
                              {"task_id": data[0]})
            value = {"task": task}
            if data[1] is not None:
                value["duplicate"] = data[1]
            return Result(OK, "", value, {})
        if kind == "tasks":
            return Result(OK, "", {"tasks": [self.tasks[t] for t in data if t in self.tasks]}, {})
        if kind == "lease":
            return Result(OK, "", {"lease_expires_at_ms": data[0],
                                   "cancel_requested": data[1]}, {})
        if kind == "tenant":
            return Result(OK, "", {"tenant": self.tenants[data]}, {})
        if kind == "gone_task":
            return Result(OK, "", {"task": codec.task_from(data, {})}, {})
        if kind == "gone_schedule":
            return Result(OK, "", {"schedule": codec.schedule_from(data, {})}, {})
        sched = self.schedules.get((data[0], data[1]))
        if sched is None:
            return Result(NOT_FOUND, f"schedule {data[1]} no longer exists", None,
                          {"schedule_id": data[1]})
        value = {"schedule": sched}
        if kind == "fire":
            value["task"] = self.tasks.get(data[2]) if data[2] is not None else None
        return Result(OK, "", value, {})

    # ======================================================================================
    # bookkeeping shared by the handlers
    # ======================================================================================
    def _intern(self, s: str) -> str:
        return sys.intern(s)

    def _tenant(self, name: str) -> TenantView:
        view = self.tenants.get(name)
        if view is None:
            view = self.tenants[name] = TenantView(name)
        self._digest.tenants.mark(name, view)
        return view

    def _touch(self, task: Task) -> None:
        """`task` is about to change, appear or disappear: the digest re-hashes it."""
        self._digest.tasks.mark(task.task_id, task)

    def _count(self, task: Task, delta: int) -> None:
        """Add `task` (delta +1) to or remove it (-1) from the counters of its state."""
        state = task.state
        if state == PENDING:
            self.tenants[task.tenant].pending += delta
            self._pending_by_priority[task.priority] += delta
        elif state == RUNNING:
            self.tenants[task.tenant].running += delta
        if state in LIVE:
            self._live += delta
        else:
            self._terminal_count += delta

    def _check_capacity(self, tenant: str) -> None:
        lim = self.limits
        view = self.tenants.get(tenant)
        if view is None and len(self.tenants) >= lim.tenants_max:
            raise Rejected(TENANT_LIMIT, f"at most {lim.tenants_max} tenants",
                           limit=lim.tenants_max)
        if self._live >= lim.live_tasks_max:
            raise Rejected(TENANT_LIMIT, f"at most {lim.live_tasks_max} live tasks",
                           limit=lim.live_tasks_max)
        if view is not None and view.live >= lim.live_tasks_per_tenant_max:
            raise Rejected(TENANT_LIMIT, f"tenant {tenant} has "
                           f"{lim.live_tasks_per_tenant_max} live tasks",
                           limit=lim.live_tasks_per_tenant_max)

    def _add_task(self, task: Task) -> None:
        assert task.task_id not in self.tasks and task.state == PENDING
        self._touch(task)
        self._tenant(task.tenant)
        self.tasks[task.task_id] = task
        self._all.add(task)
        self._by_state[PENDING].add(task)
        self._by_tenant.setdefault(task.tenant, SeqIndex()).add(task)
        if task.idempotency_key is not None:
            self._idem[(task.tenant, task.idempotency_key)] = task
        if task.schedule_id is not None:
            self._occurrences.setdefault((task.tenant, task.schedule_id), {})[task.task_id] = task
        self._count(task, +1)
        self._queue.push(task, self.now_ms)

    def _remove_task(self, task: Task) -> None:
        assert task.state in TERMINAL
        self._touch(task)
        self._count(task, -1)
        del self.tasks[task.task_id]
        self._all.remove(task)
        self._by_state[task.state].remove(task)
        index = self._by_tenant[task.tenant]
        index.remove(task)
        if not index:
            del self._by_tenant[task.tenant]
        key = (task.tenant, task.idempotency_key)
        if task.idempotency_key is not None and self._idem.get(key) is task:
            del self._idem[key]

    def _move(self, task: Task, event: str) -> None:
        """The one place a task changes state, through the transition table."""
        old = task.state
        new = transition(old, event)
        assert new is not ILLEGAL and new is not REMOVED, (old, event)
        self._touch(task)
        self._count(task, -1)
        self._by_state[old].remove(task)
        task.state = new
        self._by_state[new].add(task)
        self._count(task, +1)
        if old == RUNNING:
            task.lease_expires_at_ms = None
        if new == PENDING:
            self._queue.push(task, self.now_ms)
        elif old == PENDING and event != "claim":
            self._queue.dropped(task)
        if new in TERMINAL:
            task.completed_at_ms = self.now_ms
            self._n += 1
            heappush(self._terminal, (task.completed_at_ms, task.seq, self._n, task))
        elif old in TERMINAL:
            task.completed_at_ms = None
        self._track_occurrence(task)

    def _track_occurrence(self, task: Task) -> None:
        if task.schedule_id is None:
            return
        live = self._occurrences.setdefault((task.tenant, task.schedule_id), {})
        if task.state in LIVE:
            live[task.task_id] = task
        else:
            live.pop(task.task_id, None)
            if not live:
                del self._occurrences[(task.tenant, task.schedule_id)]

    def _deadline(self, task: Task) -> int:
        return min(task.lease_expires_at_ms, task.started_at_ms + task.timeout_ms)

    def _watch_lease(self, task: Task) -> None:
        self._n += 1
        heappush(self._leases, (self._deadline(task), task.fencing_token, self._n, task))

    def _lease_live(self, entry: tuple) -> bool:
        deadline, token, _, task = entry
        return (task.state == RUNNING and task.fencing_token == token
                and self._deadline(task) == deadline)

    def _terminal_live(self, entry: tuple) -> bool:
        task = entry[3]
        return (task.state in TERMINAL and task.completed_at_ms == entry[0]
                and self.tasks.get(task.task_id) is task)

    def _fire_live(self, entry: tuple) -> bool:
        sched = self.schedules.get((entry[1], entry[2]))
        return sched is not None and not sched.paused and sched.next_fire_ms == entry[0]

    def _tidy(self) -> None:
        """Keep every heap's top live, so that peeks (next_timer_ms...) are exact."""
        for heap, live in ((self._leases, self._lease_live),
                           (self._terminal, self._terminal_live),
                           (self._fires, self._fire_live)):
            while heap and not live(heap[0]):
                heappop(heap)

    def _find(self, task_id: str, tenant: str | None) -> Task:
        task = self.tasks.get(task_id)
        if task is None or (tenant is not None and task.tenant != tenant):
            raise Rejected(NOT_FOUND, f"task {task_id} not found", task_id=task_id)
        self._touch(task)   # every command that finds a task may change it
        return task

    def _end_attempt(self, task: Task, outcome: str, error: str | None = None) -> None:
        attempt = task.current_attempt()
        assert attempt is not None and attempt.outcome is None, task
        self._touch(task)
        attempt.ended_at_ms = self.now_ms
        attempt.outcome = outcome
        attempt.error = error

    def _after_failure(self, task: Task) -> None:
        """A running task's attempt failed: cancel, retry after backoff, or dead-letter."""
        if task.cancel_requested:
            self._move(task, "cancel")
            return
        task.failures += 1
        if task.failures <= task.max_retries:
            delay = backoff_ms(task.retry, task.failures, task.task_id, task.attempt)
            task.run_at_ms = self.now_ms + delay
            self._move(task, "retry")
        else:
            self._move(task, "dead_letter")

    # ======================================================================================
    # task commands
    # ======================================================================================
    def _submit(self, cmd: c.SubmitTask) -> tuple:
        """A repeated idempotency_key returns the existing task with duplicate=True even if
        the other fields differ: the key names the request, not its content."""
        V.submit(cmd, self.limits, self.now_ms)
        tenant = self._intern(cmd.tenant)
        if cmd.idempotency_key is not None:
            existing = self._idem.get((tenant, cmd.idempotency_key))
            if existing is not None:
                return _task_rec(existing, True)
        if cmd.task_id in self.tasks:
            raise Rejected(CONFLICT, f"task {cmd.task_id} already exists", task_id=cmd.task_id)
        self._check_capacity(tenant)
        self.task_seq += 1
        run_at = cmd.run_at_ms if cmd.run_at_ms is not None else self.now_ms
        task = Task(cmd.task_id, tenant, self._intern(cmd.task_type), cmd.payload_json,
                    cmd.priority, run_at, cmd.max_retries, cmd.retry, cmd.timeout_ms,
                    cmd.idempotency_key, None, self.now_ms, self.task_seq)
        self._add_task(task)
        return _task_rec(task, False)

    def _claim(self, cmd: c.Claim) -> tuple:
        V.claim(cmd, self.limits)
        tasks = self._queue.select(cmd.task_types, cmd.tenant, self.tenants, self.now_ms,
                                   cmd.prefetch_ms, cmd.max_tasks,
                                   lambda task: self._grant(task, cmd))
        return (OK, "", None, "tasks", [t.task_id for t in tasks])

    def _grant(self, task: Task, cmd: c.Claim) -> None:
        assert task.state == PENDING and task.run_at_ms <= self.now_ms + cmd.prefetch_ms
        self._touch(task)
        self._digest.tenants.mark(task.tenant, self.tenants[task.tenant])
        self.cluster_token += 1
        start = max(self.now_ms, task.run_at_ms)   # a prefetched lease counts from run_at
        task.attempt += 1
        task.fencing_token = self.cluster_token
        task.worker_id = cmd.worker_id
        task.started_at_ms = start
        task.lease_expires_at_ms = start + cmd.lease_ms
        task.add_attempt(Attempt(task.attempt, cmd.worker_id, self.cluster_token, start),
                         self.limits.attempts_kept_max)
        self.tenants[task.tenant].service += 1
        self._move(task, "claim")
        self._watch_lease(task)

    def _stale(self, task: Task, token: int) -> Rejected:
        if task.state == RUNNING:
            return Rejected(STALE_TOKEN, f"task {task.task_id} is held by token "
                            f"{task.fencing_token}", current_token=task.fencing_token)
        return Rejected(STALE_TOKEN, f"task {task.task_id} is {task.state}; token {token} "
                        f"holds no lease", state=task.state)

    def _heartbeat(self, cmd: c.Heartbeat) -> tuple:
        """Wrong token on a running task: stale_token. Not running: stale_token if the token
        was once issued to this task (the worker must stop), else invalid_state."""
        V.heartbeat(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if task.state == RUNNING and cmd.fencing_token == task.fencing_token:
            if not task.cancel_requested:   # a cancel stops renewals: the lease runs out
                before = self._deadline(task)
                task.lease_expires_at_ms = min(self.now_ms + cmd.lease_ms,
                                               task.started_at_ms + task.timeout_ms)
                if self._deadline(task) != before:
                    self._watch_lease(task)
            return (OK, "", None, "lease", [task.lease_expires_at_ms, task.cancel_requested])
        if task.state != RUNNING and not 0 < cmd.fencing_token <= task.fencing_token:
            raise Rejected(INVALID_STATE, f"task {task.task_id} is {task.state}",
                           state=task.state)
        raise self._stale(task, cmd.fencing_token)

    def _complete(self, cmd: c.Complete) -> tuple:
        """A completion wins over a pending cancel request; a repeat returns the first."""
        V.complete(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if task.state == RUNNING and cmd.fencing_token == task.fencing_token:
            self._end_attempt(task, "completed")
            task.result_json = cmd.result_json
            self._move(task, "complete")
            return _task_rec(task)
        if task.state == COMPLETED and cmd.fencing_token == task.fencing_token:
            return _task_rec(task)
        raise self._stale(task, cmd.fencing_token)

    def _ended_by(self, task: Task, token: int, outcome: str) -> bool:
        """Did the attempt holding `token` already end with `outcome` (a repeated report)?"""
        attempt = task.current_attempt()
        return (task.state != RUNNING and task.fencing_token == token and attempt is not None
                and attempt.fencing_token == token and attempt.outcome == outcome)

    def _fail(self, cmd: c.Fail) -> tuple:
        V.fail(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if task.state == RUNNING and cmd.fencing_token == task.fencing_token:
            self._end_attempt(task, "failed", cmd.error)
            task.last_error = cmd.error
            if not cmd.retryable and not task.cancel_requested:
                task.failures += 1
                self._move(task, "dead_letter")
            else:
                self._after_failure(task)
            return _task_rec(task)
        if self._ended_by(task, cmd.fencing_token, "failed"):
            return _task_rec(task)
        raise self._stale(task, cmd.fencing_token)

    def _release(self, cmd: c.Release) -> tuple:
        """Back to pending at its run_at (it keeps its place in the queue), no retry used."""
        V.fenced(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if task.state == RUNNING and cmd.fencing_token == task.fencing_token:
            self._end_attempt(task, "released")
            self._move(task, "cancel" if task.cancel_requested else "release")
            return _task_rec(task)
        if self._ended_by(task, cmd.fencing_token, "released"):
            return _task_rec(task)
        raise self._stale(task, cmd.fencing_token)

    def _cancel(self, cmd: c.Cancel) -> tuple:
        V.task_ref(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if task.state == PENDING:
            self._move(task, "cancel")
        elif task.state == RUNNING:
            task.cancel_requested = True
        else:
            raise Rejected(INVALID_STATE, f"task {task.task_id} is {task.state}",
                           state=task.state)
        return _task_rec(task)

    def _replay(self, cmd: c.Replay) -> tuple:
        V.task_ref(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if transition(task.state, "replay") is ILLEGAL:
            raise Rejected(INVALID_STATE, f"task {task.task_id} is {task.state}",
                           state=task.state)
        self._check_capacity(task.tenant)
        task.failures = 0
        task.cancel_requested = False
        task.run_at_ms = self.now_ms
        self._move(task, "replay")
        return _task_rec(task)

    def _discard(self, cmd: c.Discard) -> tuple:
        V.task_ref(cmd, self.limits)
        task = self._find(cmd.task_id, cmd.tenant)
        if transition(task.state, "discard") is ILLEGAL:
            raise Rejected(INVALID_STATE, f"task {task.task_id} is {task.state}",
                           state=task.state)
        record = codec.task_record(task)
        self._remove_task(task)
        return (OK, "", None, "gone_task", record)

    # ======================================================================================
    # the clock
    # ======================================================================================
    def _tick(self, cmd: c.Tick) -> tuple:
        self._expire_leases()
        self._evict()
        return _NONE

    def _expire_leases(self) -> None:
        heap, now = self._leases, self.now_ms
        while heap and heap[0][0] <= now:
            entry = heappop(heap)
            if not self._lease_live(entry):
                continue
            task = entry[3]
            if task.cancel_requested:
                outcome = "cancelled"
            elif task.started_at_ms + task.timeout_ms <= now:
                outcome = "timed_out"
            else:
                outcome = "lease_expired"
            self._end_attempt(task, outcome)
            task.last_error = outcome
            self._after_failure(task)

    def _evict(self) -> None:
        heap, lim = self._terminal, self.limits
        cutoff = self.now_ms - lim.retention_ms
        budget = lim.evictions_per_tick_max
        while heap and budget > 0:
            if not self._terminal_live(heap[0]):
                heappop(heap)
                continue
            if heap[0][0] > cutoff and self._terminal_count <= lim.terminal_tasks_max:
                break
            self._remove_task(heappop(heap)[3])
            budget -= 1

    # ======================================================================================
    # tenants
    # ======================================================================================
    def _set_tenant(self, cmd: c.SetTenant) -> tuple:
        V.set_tenant(cmd, self.limits)
        if cmd.tenant not in self.tenants and len(self.tenants) >= self.limits.tenants_max:
            raise Rejected(TENANT_LIMIT, f"at most {self.limits.tenants_max} tenants",
                           limit=self.limits.tenants_max)
        view = self._tenant(self._intern(cmd.tenant))
        if cmd.max_running is not None:
            view.max_running = cmd.max_running
        if cmd.weight is not None:
            view.weight = cmd.weight
        return (OK, "", None, "tenant", view.tenant)

    # ======================================================================================
    # schedules
    # ======================================================================================
    def _schedule(self, cmd) -> Schedule:
        V.schedule_ref(cmd, self.limits)
        sched = self.schedules.get((cmd.tenant, cmd.schedule_id))
        if sched is None:
            raise Rejected(NOT_FOUND, f"schedule {cmd.schedule_id} not found",
                           schedule_id=cmd.schedule_id)
        self._digest.schedules.mark((sched.tenant, sched.schedule_id), sched)
        return sched

    def _watch_fire(self, sched: Schedule) -> None:
        if not sched.paused and sched.next_fire_ms is not None:
            heappush(self._fires, (sched.next_fire_ms, sched.tenant, sched.schedule_id))

    def _put_schedule(self, cmd: c.PutSchedule) -> tuple:
        """Create or replace; a replacement keeps the fire history and created_at."""
        lim = self.limits
        V.put_schedule(cmd, lim)
        key = (cmd.tenant, cmd.schedule_id)
        old = self.schedules.get(key)
        if old is None:
            if len(self.schedules) >= lim.schedules_max:
                raise Rejected(TENANT_LIMIT, f"at most {lim.schedules_max} schedules",
                               limit=lim.schedules_max)
            if self._schedules_per_tenant.get(cmd.tenant, 0) >= lim.schedules_per_tenant_max:
                raise Rejected(TENANT_LIMIT, f"tenant {cmd.tenant} has "
                               f"{lim.schedules_per_tenant_max} schedules",
                               limit=lim.schedules_per_tenant_max)
            self._schedules_per_tenant[cmd.tenant] = \
                self._schedules_per_tenant.get(cmd.tenant, 0) + 1
        sched = Schedule(self._intern(cmd.tenant), cmd.schedule_id, cmd.cron, cmd.timezone,
                         cmd.template, cmd.overlap, cmd.misfire, cmd.catchup_window_ms,
                         cmd.paused, cmd.start_at_ms, cmd.end_at_ms, cmd.jitter_ms,
                         cmd.next_fire_ms, old.created_at_ms if old else self.now_ms,
                         self.now_ms, old.fires if old else None)
        if old is not None:
            self._digest.schedules.mark(key, old)
        self._digest.schedules.mark(key, sched)
        self.schedules[key] = sched
        self._watch_fire(sched)
        return _schedule_rec(sched)

    def _delete_schedule(self, cmd: c.DeleteSchedule) -> tuple:
        sched = self._schedule(cmd)
        del self.schedules[(sched.tenant, sched.schedule_id)]
        left = self._schedules_per_tenant[sched.tenant] - 1
        if left:
            self._schedules_per_tenant[sched.tenant] = left
        else:
            del self._schedules_per_tenant[sched.tenant]
        return (OK, "", None, "gone_schedule", codec.schedule_record(sched))

    def _pause_schedule(self, cmd: c.PauseSchedule) -> tuple:
        sched = self._schedule(cmd)
        if not sched.paused:
            sched.paused = True
            sched.updated_at_ms = self.now_ms
        return _schedule_rec(sched)

    def _resume_schedule(self, cmd: c.ResumeSchedule) -> tuple:
        """Resuming a running schedule changes nothing (its next fire stays)."""
        V.resume(cmd, self.limits)
        sched = self._schedule(cmd)
        if sched.paused:
            sched.paused = False
            sched.next_fire_ms = cmd.next_fire_ms
            sched.updated_at_ms = self.now_ms
            self._watch_fire(sched)
        return _schedule_rec(sched)

    def _record_fire(self, sched: Schedule, fire_ms: int, outcome: str,
                     task: Task | None = None) -> tuple:
        sched.fires.append(FireRecord(fire_ms, outcome, task.task_id if task else None))
        if len(sched.fires) > self.limits.fires_kept:
            del sched.fires[0]
        return _fire_rec(sched, task)

    def _fire(self, cmd: c.Fire) -> tuple:
        """Cron fires apply only at the schedule's next_fire_ms (a repeat creates nothing).
        Misfire: older than catchup_window -> "missed"; with misfire "skip", later than
        `misfire_skip_grace_ms` -> "skipped". Overlap "skip": any live occurrence skips;
        "buffer_one": a pending occurrence skips. Paused: nothing (manual: invalid_state)."""
        V.fire(cmd, self.limits)
        sched = self._schedule(cmd)
        if sched.paused:
            if cmd.manual:
                raise Rejected(INVALID_STATE, f"schedule {sched.schedule_id} is paused")
            return _fire_rec(sched, None)
        task_id = occurrence_task_id(sched.tenant, sched.schedule_id, cmd.fire_ms, cmd.manual)
        if cmd.manual:
            if task_id in self.tasks:
                return _fire_rec(sched, self.tasks[task_id])
            skipped = self._overlapping(sched)
            if not skipped:
                self._check_capacity(sched.tenant)   # before any change: a clean 429
            return self._run_fire(sched, cmd.fire_ms, task_id, skipped)
        if cmd.fire_ms != sched.next_fire_ms:
            return _fire_rec(sched, None)
        sched.next_fire_ms = cmd.next_fire_ms
        self._watch_fire(sched)
        if sched.end_at_ms is not None and cmd.fire_ms > sched.end_at_ms:
            sched.next_fire_ms = None
            return _fire_rec(sched, None)
        if sched.start_at_ms is not None and cmd.fire_ms < sched.start_at_ms:
            return _fire_rec(sched, None)
        late_ms = self.now_ms - cmd.fire_ms
        if late_ms > sched.catchup_window_ms:
            return self._record_fire(sched, cmd.fire_ms, "missed")
        if sched.misfire == "skip" and late_ms > self.limits.misfire_skip_grace_ms:
            return self._record_fire(sched, cmd.fire_ms, "skipped")
        if task_id in self.tasks:
            return _fire_rec(sched, self.tasks[task_id])
        skipped = self._overlapping(sched)
        if not skipped:
            try:
                self._check_capacity(sched.tenant)
            except Rejected:
                skipped = True   # the schedule already advanced: record, do not fail
        return self._run_fire(sched, cmd.fire_ms, task_id, skipped)

    def _overlapping(self, sched: Schedule) -> bool:
        live = self._occurrences.get((sched.tenant, sched.schedule_id), {})
        if sched.overlap == "skip":
            return bool(live)
        if sched.overlap == "buffer_one":
            return any(t.state == PENDING for t in live.values())
        return False

    def _run_fire(self, sched: Schedule, fire_ms: int, task_id: str, skipped: bool) -> tuple:
        if skipped:
            return self._record_fire(sched, fire_ms, "skipped")
        t = sched.template
        self.task_seq += 1
        task = Task(task_id, sched.tenant, self._intern(t.task_type), t.payload_json,
                    t.priority, fire_ms + fire_jitter_ms(sched.schedule_id, fire_ms,
                                                         sched.jitter_ms),
                    t.max_retries, t.retry, t.timeout_ms, None, sched.schedule_id,
                    self.now_ms, self.task_seq)
        self._add_task(task)
        return self._record_fire(sched, fire_ms, "ran", task)

    # ======================================================================================
    # reads (callers hold the replica lock; returned objects must not be mutated)
    # ======================================================================================
    def get_task(self, task_id: str, tenant: str | None = None) -> Task | None:
        task = self.tasks.get(task_id)
        if task is None or (tenant is not None and task.tenant != tenant):
            return None
        return task

    def list_tasks(self, state=None, tenant=None, task_type=None, schedule_id=None,
                   cursor=None, limit=100) -> tuple[list[Task], str | None]:
        """Newest first. `cursor` is the opaque `next_cursor` of the previous page; a
        malformed one raises ValueError (callers answer invalid_argument). The smallest of
        the state / tenant indexes is walked; other filters are checked per task."""
        before = _parse_cursor(cursor)
        if state is not None and state not in self._by_state:
            raise ValueError(f"unknown state {state!r}")
        candidates = [self._all]
        if state is not None:
            candidates.append(self._by_state[state])
        if tenant is not None:
            candidates.append(self._by_tenant.get(tenant, SeqIndex()))
        index = min(candidates, key=len)
        page: list[Task] = []
        limit = max(1, int(limit))
        for task in index.newest_first(before):
            if ((state is None or task.state == state)
                    and (tenant is None or task.tenant == tenant)
                    and (task_type is None or task.task_type == task_type)
                    and (schedule_id is None or task.schedule_id == schedule_id)):
                if len(page) == limit:
                    return page, str(page[-1].seq)
                page.append(task)
        return page, None

    def get_schedule(self, tenant: str, schedule_id: str) -> Schedule | None:
        return self.schedules.get((tenant, schedule_id))

    def list_schedules(self, tenant=None, cursor=None,
                       limit=100) -> tuple[list[Schedule], str | None]:
        """Sorted by (tenant, schedule_id); the cursor is the last key of the page."""
        after = None
        if cursor is not None:
            if type(cursor) is not str or "\x1f" not in cursor or len(cursor) > CURSOR_CHARS_MAX:
                raise ValueError("invalid cursor")
            after = tuple(cursor.split("\x1f", 1))
        keys = sorted(k for k in self.schedules
                      if (tenant is None or k[0] == tenant) and (after is None or k > after))
        limit = max(1, int(limit))
        page = [self.schedules[k] for k in keys[:limit]]
        more = len(keys) > limit
        return page, ("\x1f".join(keys[limit - 1]) if more else None)

    def get_tenant(self, tenant: str) -> TenantView | None:
        return self.tenants.get(tenant)

    def list_tenants(self) -> list[TenantView]:
        return [self.tenants[name] for name in sorted(self.tenants)]

    def knows_request(self, request_id: str) -> bool:
        """A command with this request id was applied (and its result is still recorded)."""
        return request_id in self.requests

    def has_claimable(self, task_types, tenant, prefetch_ms, now_ms) -> bool:
        return self._queue.has_claimable(task_types, tenant, self.tenants,
                                         max(now_ms, self.now_ms), prefetch_ms)

    def next_due_ms(self, task_types, tenant=None) -> int | None:
        """Earliest run_at of a pending task of those types; a due one reads as now_ms."""
        return self._queue.next_due_ms(task_types, tenant, self.now_ms)

    def next_timer_ms(self) -> int | None:
        """Earliest instant a Tick changes something: a lease expiry or task timeout, or a
        retention eviction. (A retry's backoff end is the task's run_at: see next_due_ms.)"""
        when = []
        if self._leases:
            when.append(self._leases[0][0])
        if self._terminal_count > self.limits.terminal_tasks_max:
            when.append(self.now_ms)
        elif self._terminal:
            when.append(self._terminal[0][0] + self.limits.retention_ms)
        return min(when) if when else None

    def due_fires(self, now_ms: int) -> list[tuple[str, str, int]]:
        """Active schedules whose next fire is at or before now_ms, earliest first."""
        heap, out, seen = self._fires, [], {}
        frontier = [(heap[0], 0)] if heap else []
        while frontier:
            entry, i = heappop(frontier)
            if entry[0] > now_ms:
                break
            if self._fire_live(entry) and entry not in seen:
                seen[entry] = True
                out.append((entry[1], entry[2], entry[0]))
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heappush(frontier, (heap[child], child))
        return out

    def next_fire_ms(self) -> int | None:
        return self._fires[0][0] if self._fires else None

    def stats(self) -> dict:
        return {
            "seq": self.seq,
            "now_ms": self.now_ms,
            "tasks_by_state": {s: len(self._by_state[s]) for s in STATES},
            "pending_by_priority": dict(enumerate(self._pending_by_priority)),
            "tenants": {v.tenant: {"pending": v.pending, "running": v.running}
                        for v in self.list_tenants()},
            "schedules": len(self.schedules),
            "requests": len(self.requests),
        }

    # ======================================================================================
    # snapshots and the digest
    # ======================================================================================
    def _head(self) -> dict:
        return {
            "v": codec.SNAPSHOT_VERSION, "seq": self.seq, "now_ms": self.now_ms,
            "cluster_token": self.cluster_token, "task_seq": self.task_seq,
            "tenants": [codec.tenant_record(v) for v in self.list_tenants()],
            "schedules": [codec.schedule_record(self.schedules[k])
                          for k in sorted(self.schedules)],
            "tasks_sum": self._digest.tasks.acc.to_bytes(16, "big"),
        }

    def snapshot(self) -> bytes:
        self._digest.fold()   # the sums and hashes written must be those of the records
        return codec.encode_snapshot(self._head(), _Sized(self._all.oldest_first(),
                                                          len(self.tasks)), self.requests,
                                     self._digest.requests.hashes)

    def digest(self) -> str:
        """O(changes since the last call): see digest.py."""
        return self._digest.hexdigest()

    def _full_digest(self) -> str:
        """The digest recomputed from scratch (tests compare it with `digest()`)."""
        return full_hexdigest(self)

    def _fold_now_and_then(self) -> None:
        """Folds the changes beyond the window, so that no `digest()` call ever has more
        than a bounded amount of work to catch up on."""
        d = self._digest
        over = len(d.tasks.dirty) - DIGEST_DIRTY_MAX
        if over > 0:
            d.tasks.fold(over)
        if d.requests.unfolded() >= DIGEST_REQUESTS_UNFOLDED_MAX:
            d.tenants.fold()
            d.schedules.fold()
            d.requests.fold()

    def fold_digest(self, items_max: int) -> int:
        """Fold up to about `items_max` of the digest's oldest pending changes; returns how
        many are left. Lets the node bring `digest()` up to date in short lock holds."""
        return self._digest.fold_some(items_max)

    @classmethod
    def restore(cls, blob: bytes, limits: Limits | None = None) -> "StateMachine":
        """Rebuilds the derived state in bulk (heaps heapified once, not pushed per task)
        and folds the digest in as it goes, so the first `digest()` afterwards is cheap."""
        paused = gc.isenabled()
        gc.disable()   # every object made here survives: collections would only re-scan them
        try:
            return cls._restore(blob, limits)
        finally:
            if paused:
                gc.enable()

    @classmethod
    def _restore(cls, blob: bytes, limits: Limits | None) -> "StateMachine":
        sm = cls(limits)
        head, tasks, requests = codec.decode_snapshot(blob, sm._intern)
        sm.seq, sm.now_ms = head["seq"], head["now_ms"]
        sm.cluster_token, sm.task_seq = head["cluster_token"], head["task_seq"]
        for r in head["tenants"]:
            view = codec.tenant_from(r)
            view.tenant = sm._intern(view.tenant)
            sm.tenants[view.tenant] = view
        cache: dict = {}
        summed = sm._load_tasks(tasks)
        sm._digest.tasks.loaded(summed if summed is not None
                                else int.from_bytes(head["tasks_sum"], "big"))
        for r in head["schedules"]:
            sched = codec.schedule_from(r, cache)
            sched.tenant = sm._intern(sched.tenant)
            sm.schedules[(sched.tenant, sched.schedule_id)] = sched
            sm._schedules_per_tenant[sched.tenant] = \
                sm._schedules_per_tenant.get(sched.tenant, 0) + 1
            sm._watch_fire(sched)
        for (rid, rec), h in requests:   # h: the item hash, or the bytes to hash (1, 2)
            sm.requests[rid] = tuple(rec)
            sm._digest.requests.add_folded(h if type(h) is int else item_hash(h))
        sm._tidy()
        sm._digest.mark_all()
        sm._digest.fold()
        return sm

    def _load_tasks(self, chunks) -> int | None:
        """Tasks in seq order from a snapshot, chunk by chunk: indexes, counters, queue and
        heaps in one loop with its lookups hoisted (a restart pays it per task). Returns the
        sum of the tasks' item hashes when the format has their encodings (1, 2), else None:
        format 3 carries the sum, and the tasks stay `UNHASHED` (digest.py)."""
        tasks, by_state = self.tasks, self._by_state
        append_all, leases, terminal = self._all.append, self._leases, self._terminal
        append_state = {state: index.append for state, index in by_state.items()}
        by_tenant, tenants, idem = self._by_tenant, self.tenants, self._idem
        pending_by_priority = self._pending_by_priority
        queued: list[Task] = []
        live = done = 0
        summed = None
        for chunk, encodings in chunks:
            if encodings is None:
                hashes = repeat(UNHASHED, len(chunk))
            else:
                hashes = [item_hash(e) for e in encodings]
                summed = (summed or 0) + sum(hashes)
            for task, h in zip(chunk, hashes):
                task.dh = h
                state, tenant = task.state, task.tenant
                if state not in by_state:
                    raise codec.DecodeError(f"snapshot: task {task.task_id!r} is {state!r}")
                tasks[task.task_id] = task
                append_all(task)
                append_state[state](task)
                index = by_tenant.get(tenant)
                if index is None:
                    self._tenant(tenant)   # a valid snapshot lists it already
                    index = by_tenant[tenant] = SeqIndex()
                index.append(task)
                if task.idempotency_key is not None:
                    idem[(tenant, task.idempotency_key)] = task
                if task.schedule_id is not None:
                    self._track_occurrence(task)
                if state == PENDING:
                    tenants[tenant].pending += 1
                    pending_by_priority[task.priority] += 1
                    live += 1
                    queued.append(task)
                elif state == RUNNING:
                    tenants[tenant].running += 1
                    live += 1
                    self._n += 1
                    leases.append((self._deadline(task), task.fencing_token, self._n, task))
                else:
                    done += 1
                    self._n += 1
                    terminal.append((task.completed_at_ms, task.seq, self._n, task))
        if len(tasks) != len(self._all):   # checked once here rather than per task
            raise codec.DecodeError("snapshot: a task id appears twice")
        self._live += live
        self._terminal_count += done
        heapify(leases)
        heapify(terminal)
        self._queue.load(queued, self.now_ms)
        return summed


class _Sized:
    """An iterator with a known length (the snapshot writes the task count first)."""

    __slots__ = ("it", "n")

    def __init__(self, it, n: int) -> None:
        self.it, self.n = it, n

    def __iter__(self):
        return self.it

    def __len__(self) -> int:
        return self.n


def _parse_cursor(cursor) -> int | None:
    if cursor is None:
        return None
    if type(cursor) is not str or not cursor.isdigit() or len(cursor) > 20:
        raise ValueError("invalid cursor")
    return int(cursor)
