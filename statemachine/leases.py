"""Handlers that act on leases: claim, heartbeat, complete, fail, release, and the clock's
lease expiry (Tick).

A claim takes tasks from the claim queue (queue.py) in claim order and grants each a lease
with a fresh fencing token (the cluster-wide `cluster_token`). Every later report carries
that token: the lifecycle table (lifecycle.py) checks it, answers a repeated report with
the first answer, and refuses a stale one. An attempt ends by completion, failure,
release or expiry; a failed or expired one uses up a retry (a backoff delay, rules.py)
unless a cancel was requested.
"""
from __future__ import annotations

from collections.abc import Callable
from heapq import heappop
from typing import TYPE_CHECKING

from . import commands as c
from . import validate as V
from . import weighted
from .lifecycle import CLAIM, COMPLETE, EXPIRE, FAIL, HEARTBEAT, RELEASE, Row, decide
from .errors import INVALID_ARGUMENT
from .model import CANCELLED, PENDING, RUNNING, Attempt, Task
from .results import DONE, Answer, evicted_answer, lease_answer, task_answer, tasks_answer
from .rules import backoff_ms, static_key
from .tasks import evict, find
from .workflows import check_result

if TYPE_CHECKING:
    from .machine import StateMachine


def claim(sm: StateMachine, cmd: c.Claim) -> Answer:
    """Tasks in claim order; one whose keyed limit is spent is held (ratelimits.py) and the
    claim goes on to the next, in rounds: a round's holds used places of `max_tasks`.

    A hold may leave budget of the task's other limits unused (it was released for it):
    that budget belongs to the next task held there, which only the limiter's wake puts
    back in the queue. So once a hold opened a partition, the round sets every further
    task aside (back to the queue) and the next round starts with that wake: no task
    ranked after a held one takes its budget first."""
    V.claim(cmd, sm.limits)
    limiter = sm.store.limiter
    limiter.wake(sm.now_ms)
    granted: list[Task] = []
    deferred: list[Task] = []
    aside: list[Task] = []      # set aside in this round, back to the queue after it
    rounds = 0
    while len(granted) < cmd.max_tasks:
        rounds += 1
        holds = limiter.holds
        taken = _select(sm, cmd, cmd.max_tasks - len(granted),
                        lambda task: _take(sm, task, cmd, deferred, aside))
        granted += [t for t in taken if t.state == RUNNING]
        for task in aside:
            sm.store.queue.push(task, sm.now_ms)
        aside.clear()
        if not taken or limiter.holds == holds:
            break   # no hold took a place: the queue had no more for this claim
        limiter.wake(sm.now_ms)   # a held task's other limits may release another
    for task in deferred:   # limited tasks are not handed out early: back to wait
        sm.store.queue.push(task, sm.now_ms)
    if rounds > 1:
        # A later round granted what a hold released (a task held under one limit
        # leaves its other limits' budget to the next held task): it may rank before
        # what an earlier round granted. The answer lists them in claim order; the
        # grants (and their fencing tokens) stay as made.
        aging_ms = sm.store.queue.aging_ms
        granted.sort(key=lambda t: (static_key(t.priority, t.run_at_ms, aging_ms),
                                    t.run_at_ms, t.seq))
    return tasks_answer([t.task_id for t in granted])


def _select(sm: StateMachine, cmd: c.Claim, max_tasks: int,
            take: Callable[[Task], None]) -> list[Task]:
    if cmd.tier_weights:   # weighted polling by tier (DESIGN 5.1)
        return weighted.select(sm.store.queue, cmd.task_types, cmd.tenant, sm.tenants,
                               sm.now_ms, cmd.prefetch_ms, max_tasks, take, cmd.tier_weights)
    return sm.store.queue.select(cmd.task_types, cmd.tenant, sm.tenants, sm.now_ms,
                                 cmd.prefetch_ms, max_tasks, take,
                                 (cmd.priority_min, cmd.priority_max))


def _take(sm: StateMachine, task: Task, cmd: c.Claim, deferred: list[Task],
          aside: list[Task]) -> None:
    """The queue gave `task` to this claim: grant it, or (bound by a keyed limit) hold it
    under its spent limit, or keep a limited task the claim reached early for later, or
    set it aside for the next round (a hold of this round opened a partition). A task not
    granted stays pending; its queue entries die (qver moves on)."""
    limiter = sm.store.limiter
    if limiter.opened:
        task.qver += 1
        aside.append(task)
        return
    if task.limits:
        if task.run_at_ms > sm.now_ms:   # a window counts starts in order: not early
            task.qver += 1
            deferred.append(task)
            return
        where = limiter.blocker(task, sm.now_ms)
        if where is not None:
            limiter.hold(task, where, sm.now_ms)
            return
        _grant(sm, task, cmd)
        limiter.granted(task, sm.now_ms)
        return
    _grant(sm, task, cmd)


def _grant(sm: StateMachine, task: Task, cmd: c.Claim) -> None:
    assert task.state == PENDING and task.run_at_ms <= sm.now_ms + cmd.prefetch_ms
    row = decide(task, CLAIM)
    view = sm.tenants[task.tenant]
    sm.cluster_token += 1
    start = max(sm.now_ms, task.run_at_ms)   # a prefetched lease counts from run_at
    task.attempt += 1
    task.fencing_token = sm.cluster_token
    task.worker_id = cmd.worker_id
    task.started_at_ms = start
    task.lease_expires_at_ms = start + cmd.lease_ms
    task.add_attempt(Attempt(task.attempt, cmd.worker_id, sm.cluster_token, start),
                     sm.limits.attempts_kept_max)
    view.service += 1
    sm.store.move(task, row.new, sm.now_ms)   # running: the store watches the lease


def heartbeat(sm: StateMachine, cmd: c.Heartbeat) -> Answer:
    """Renews the lease (bounded by the task's timeout), unless a cancel was requested: then
    the lease runs out and the answer tells the worker to stop. Progress, if carried, is
    kept either way."""
    V.heartbeat(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    decide(task, HEARTBEAT, cmd.fencing_token)
    lease, started = task.lease_expires_at_ms, task.started_at_ms
    assert lease is not None and started is not None, task   # running: set by its claim
    if cmd.progress_permille >= 0:   # the latest report wins (store.progress)
        sm.store.progress[task.task_id] = (cmd.progress_permille, cmd.progress_message,
                                           sm.now_ms)
    if not task.cancel_requested:
        store = sm.store
        before = store.deadline(task)
        lease = task.lease_expires_at_ms = min(sm.now_ms + cmd.lease_ms,
                                               started + task.timeout_ms)
        if store.deadline(task) != before:
            store.watch_lease(task)
    return lease_answer(lease, task.cancel_requested)


def complete(sm: StateMachine, cmd: c.Complete) -> Answer:
    """A completion wins over a pending cancel request; a repeat returns the first."""
    V.complete(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, COMPLETE, cmd.fencing_token)
    if not row.repeat:
        check_result(sm, task, cmd.result_json)   # a workflow step's tighter bound
        _end_attempt(sm, task, "completed")
        task.result_json = cmd.result_json
        sm.store.move(task, row.new, sm.now_ms)
    return task_answer(task.task_id)


def fail(sm: StateMachine, cmd: c.Fail) -> Answer:
    V.fail(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, FAIL, cmd.fencing_token, cmd.retryable)
    if cmd.retry_after_ms > task.retry.max_ms:
        raise V.Rejected(INVALID_ARGUMENT, f"retry_after_s must be at most the task's retry "
                       f"max_s ({task.retry.max_ms / 1000:g})", field="retry_after_s")
    if not row.repeat:
        _end_attempt(sm, task, "failed", cmd.error)
        task.last_error = cmd.error
        _after_failure(sm, task, row, cmd.retry_after_ms)
    return task_answer(task.task_id)


def release(sm: StateMachine, cmd: c.Release) -> Answer:
    """Back to pending at its run_at (it keeps its place in the queue), no retry used."""
    V.fenced(cmd, sm.limits)
    task = find(sm, cmd.task_id, cmd.tenant)
    row = decide(task, RELEASE, cmd.fencing_token)
    if not row.repeat:
        _end_attempt(sm, task, "released")
        sm.store.move(task, row.new, sm.now_ms)
    return task_answer(task.task_id)


def tick(sm: StateMachine, cmd: c.Tick) -> Answer:
    """The clock: expire leases and timeouts that ended by now, release tasks held by keyed
    limits whose budget freed, then evict old tasks (the answer lists them, for the node's
    archive)."""
    _expire(sm)
    sm.store.limiter.wake(sm.now_ms)
    evicted = evict(sm)
    return evicted_answer(evicted) if evicted else DONE


def _expire(sm: StateMachine) -> None:
    store, now = sm.store, sm.now_ms
    heap = store.leases
    while heap and heap[0][0] <= now:
        entry = heappop(heap)
        if not store.lease_live(entry):
            continue
        task = entry[3]
        if task.cancel_requested:
            outcome = "cancelled"
        elif task.started_at_ms + task.timeout_ms <= now:
            outcome = "timed_out"
        else:
            outcome = "lease_expired"
        row = decide(task, EXPIRE)
        _end_attempt(sm, task, outcome)
        task.last_error = outcome
        _after_failure(sm, task, row)


def cut_short(sm: StateMachine, task: Task, why: str) -> None:
    """End a running task's lease now, as its expiry would (the attempt ends
    `lease_expired` with `why` as its error, one retry used up), but the task is due again
    at once rather than after a backoff: its worker is gone, the task did not fail
    (sessions.py). A cancel requested meanwhile cancels it; no retry left dead-letters it."""
    row = decide(task, EXPIRE)
    _end_attempt(sm, task, "lease_expired", why)
    task.last_error = why
    if row.new != CANCELLED:
        task.failures += 1
    sm.store.move(task, row.new, sm.now_ms)


def _end_attempt(sm: StateMachine, task: Task, outcome: str, error: str | None = None) -> None:
    attempt = task.current_attempt()
    assert attempt is not None and attempt.outcome is None, task
    attempt.ended_at_ms = sm.now_ms
    attempt.outcome = outcome
    attempt.error = error


def _after_failure(sm: StateMachine, task: Task, row: Row, after_ms: int = 0) -> None:
    """A failed or expired attempt: cancelled, or one retry used up (back to pending after
    the backoff, or after `after_ms` when the handler asked for it, or dead-lettered)."""
    if row.new != CANCELLED:
        task.failures += 1
    if row.new == PENDING:
        delay = after_ms or backoff_ms(task.retry, task.failures, task.task_id, task.attempt)
        task.run_at_ms = sm.now_ms + delay
    sm.store.move(task, row.new, sm.now_ms)
