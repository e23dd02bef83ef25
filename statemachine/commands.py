"""Commands: the only inputs of the state machine.

A command is a frozen, keyword-only dataclass. Everything that depends on the environment
is decided by the proposer (a node) and travels inside the command (DESIGN.md section 3):
the proposer's clock (`now_ms`), generated ids (`task_id`), cron fire times, and the
`request_id` that makes a retried proposal apply at most once.

Units are last in names: `_ms` is milliseconds (epoch milliseconds for instants),
`_permille` is thousandths. No floats: replicas must agree to the bit.

`codec.py` is the only module that turns commands into bytes and back.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Backoff after a retryable failure: delay(attempt) for attempt = 1, 2, ...

    exponential: base_ms * multiplier^(attempt-1); linear: base_ms * attempt; fixed: base_ms.
    Capped at max_ms; then jitter subtracts up to jitter_permille/1000 of the delay, derived
    deterministically from (task_id, attempt).
    """

    backoff: str = "exponential"     # "exponential" | "linear" | "fixed"
    base_ms: int = 1_000
    max_ms: int = 300_000
    multiplier_milli: int = 2_000    # 2.0
    jitter_permille: int = 100       # 0.1


@dataclass(frozen=True, kw_only=True, slots=True)
class Command:
    request_id: str   # unique per logical request; a repeat is answered from the request table
    now_ms: int       # the proposer's clock; the state clock is max(previous, now_ms)


# --- tasks -------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class SubmitTask(Command):
    task_id: str                     # made by the proposer
    tenant: str
    task_type: str
    payload_json: str = "null"       # canonical JSON text, size-checked
    priority: int = 5                # 0 (highest) .. 10 (lowest)
    run_at_ms: int | None = None     # None: now
    timeout_ms: int = 300_000
    max_retries: int = 3
    retry: RetryPolicy = RetryPolicy()
    idempotency_key: str | None = None
    limits: tuple[str, ...] = ()     # names of keyed limits (added later: codec)
    traceparent: str | None = None   # W3C trace context of the submitter (added later: codec)


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim(Command):
    worker_id: str
    task_types: tuple[str, ...]
    max_tasks: int = 1
    lease_ms: int = 30_000
    prefetch_ms: int = 0             # early dispatch horizon (0..1000)
    tenant: str | None = None        # a tenant-scoped caller claims only its tenant's tasks
    priority_min: int = 0            # only tasks whose effective priority is in
    priority_max: int = 10           # [priority_min, priority_max] (added later: codec)
    # weighted polling by tier (DESIGN 5.1): (lo, hi, weight) per named tier, most urgent
    # first; () takes the claim's range in claim order (added later: codec)
    tier_weights: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat(Command):
    task_id: str
    fencing_token: int
    lease_ms: int = 30_000
    tenant: str | None = None
    # The handler's progress (DESIGN 9), added later (codec): -1 carries none; else the
    # fraction done in thousandths (0..1000) and a short message.
    progress_permille: int = -1
    progress_message: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Complete(Command):
    task_id: str
    fencing_token: int
    result_json: str = "null"
    tenant: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Fail(Command):
    task_id: str
    fencing_token: int
    error: str = ""
    retryable: bool = True
    tenant: str | None = None
    retry_after_ms: int = 0          # > 0: the retry is due after exactly this (added later)


@dataclass(frozen=True, kw_only=True, slots=True)
class Release(Command):
    """Give a claimed task back unrun (waiter gone before the claim reached it, or a worker
    stopping): back to pending at once; does not use up a retry."""

    task_id: str
    fencing_token: int
    tenant: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Cancel(Command):
    task_id: str
    tenant: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class Replay(Command):
    """dead_letter -> pending, with a fresh retry budget."""

    task_id: str
    tenant: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class Discard(Command):
    """Remove a dead-lettered task for good."""

    task_id: str
    tenant: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


# --- tenants -----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class SetTenant(Command):
    tenant: str
    max_running: int | None = None   # None: leave as is; 0: unlimited
    weight: int | None = None        # None: leave as is; >= 1
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


# --- schedules ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class TaskTemplate:
    task_type: str
    payload_json: str = "null"
    priority: int = 5
    timeout_ms: int = 300_000
    max_retries: int = 3
    retry: RetryPolicy = RetryPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class PutSchedule(Command):
    """Create or replace. The proposer validated `cron`/`timezone` and computed the first
    `next_fire_ms` (None: the schedule never fires again)."""

    tenant: str
    schedule_id: str
    cron: str
    timezone: str = "UTC"
    template: TaskTemplate
    overlap: str = "allow"           # "allow" | "skip" | "buffer_one"
    misfire: str = "run_all"         # "run_all" | "run_once" | "skip"
    catchup_window_ms: int = 60_000
    paused: bool = False
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    jitter_ms: int = 0
    next_fire_ms: int | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteSchedule(Command):
    tenant: str
    schedule_id: str
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class PauseSchedule(Command):
    tenant: str
    schedule_id: str
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeSchedule(Command):
    tenant: str
    schedule_id: str
    next_fire_ms: int | None = None  # computed by the proposer from now
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class Fire(Command):
    """One occurrence of a schedule, proposed by the leader's timer (or `trigger`).

    A cron fire is applied only if `fire_ms` equals the schedule's current `next_fire_ms`
    (so a fire proposed twice, e.g. across a leader change, creates one task); the schedule
    then advances to `next_fire_ms`. `manual` fires (trigger-now) do not advance it. The
    task id is derived from (tenant, schedule_id, fire_ms, manual) inside the state machine;
    with `shard` (the proposing shard of a cluster with several) it names that shard, so
    any node routes it (`rules.occurrence_task_id`). Added after the other fields: an entry
    written without it decodes with None (codec.py).
    """

    tenant: str
    schedule_id: str
    fire_ms: int
    next_fire_ms: int | None
    manual: bool = False
    shard: int | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


# --- keyed limits (ratelimits.py) ---------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class PutLimit(Command):
    """Create or change a limit. `rate` claims in any window of `per_ms`, and/or
    `concurrency` running at once (0: not set; at least one is set); per value of
    `partition_by` ("tenant" or a top-level payload field; None: one budget)."""

    name: str
    rate: int = 0
    per_ms: int = 1_000
    concurrency: int = 0
    partition_by: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class DeleteLimit(Command):
    name: str
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class PauseLimit(Command):
    """A worker's RateLimited report: the running task's claim is given back (pending,
    the attempt not counted) and the limit's partition of that task claims nothing for
    `after_ms`, for every worker."""

    task_id: str
    fencing_token: int
    limit: str
    after_ms: int
    tenant: str | None = None


# --- paused queues (pauses.py, issue 48) --------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class PauseQueue(Command):
    """Stop claiming the pending tasks of a task type, a tenant, or both (at least one):
    they wait, pending, until a ResumeQueue of the same selector."""

    task_type: str | None = None
    tenant: str | None = None
    reason: str | None = None        # the operator's words, shown with the pause
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


@dataclass(frozen=True, kw_only=True, slots=True)
class ResumeQueue(Command):
    task_type: str | None = None
    tenant: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


# --- workflows (DESIGN 5.2) --------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class SubmitWorkflow(Command):
    """A graph of steps, all created in this one entry or none. `templates`: the distinct
    task fields of its steps, each (task_type, priority, timeout_ms, max_retries, retry
    record [backoff, base_ms, max_ms, multiplier_milli, jitter_permille]); `steps`: one row
    per step, in the order given: (name, task_id, template index, payload_json, deps
    (indexes of other rows), on_parent_failure ("cancel" | "run")). Shared templates keep a
    10,000-step fan-out inside one Raft entry. The proposer makes the workflow's id and
    every step's task id (`graphs.compact` builds both tuples from whole rows)."""

    workflow_id: str
    tenant: str
    templates: tuple = ()
    steps: tuple = ()
    idempotency_key: str | None = None
    traceparent: str | None = None   # W3C trace context of the submitter, for every step


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelWorkflow(Command):
    workflow_id: str
    tenant: str | None = None
    actor: str | None = None         # who asked (DESIGN 14.6); None: not audited


# --- the audit trail ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class AuditNote(Command):
    """An audit entry for an operator action that is not a state machine command (a
    leadership transfer, DESIGN 14.6): it changes nothing but the trail."""

    actor: str
    action: str
    target: str
    change_json: str = "null"


# --- worker sessions (sessions.py, DESIGN 9) ------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class OpenSession(Command):
    """A worker's session: open it, or change its timeout. Its liveness is the leader's
    business (node/scheduling/sessions.py), not replicated: a session records only that
    the worker asked to have its tasks given back once it is silent for `timeout_ms`."""

    worker_id: str
    timeout_ms: int
    tenant: str | None = None        # a tenant-scoped caller's session: its tasks only


@dataclass(frozen=True, kw_only=True, slots=True)
class EndSession(Command):
    """End a worker's session. `expired` (the leader heard nothing from the worker for its
    timeout): every task still leased to the worker is given back at once, its attempt
    ended as a lease expiry. Not expired (the worker stopping): nothing else changes."""

    worker_id: str
    expired: bool = False
    tenant: str | None = None


# --- the clock and barriers -----------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class Tick(Command):
    """Advance the state clock: expire leases, time out tasks, end retry backoffs, evict
    retained terminal tasks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Barrier(Command):
    """No effect but advancing `seq` and the clock: a new leader's first entry, and the
    fence behind linearizable reads."""


COMMAND_TYPES: tuple[type[Command], ...] = (
    SubmitTask, Claim, Heartbeat, Complete, Fail, Release, Cancel, Replay, Discard,
    SetTenant, PutSchedule, DeleteSchedule, PauseSchedule, ResumeSchedule, Fire, Tick, Barrier,
    AuditNote, PutLimit, DeleteLimit, PauseLimit, SubmitWorkflow, CancelWorkflow,
    PauseQueue, ResumeQueue, OpenSession, EndSession,
)


class Batch(list):
    """A decoded batch and its bytes (`raw`: the digest's roll hashes them, digest.py)."""
    __slots__ = ("raw",)
    raw: bytes

    @classmethod
    def of(cls, cmds: list, raw: bytes) -> "Batch":
        """`cmds` as `codec.decode_batch(raw)` returns them, for the bytes
        `codec.encode_batch(cmds)` made (a node applying a batch it proposed itself)."""
        batch = cls(cmds)
        batch.raw = raw
        return batch
