"""The task model: the records the state machine owns.

A task's `state` is one of five values; how it changes is the lifecycle table's business
(lifecycle.py). Cancelling a running task does not change its state: it sets
`cancel_requested`, and whatever ends the attempt next takes the task to `cancelled`.

Memory: a pending task must cost well under 1 KiB, so records use `__slots__`, strings that
repeat (tenant, task type) are interned by the machine, `execution_id` is the task id (one
occurrence, one task), and the attempts list is created on the first claim.
"""
from __future__ import annotations

from .commands import RetryPolicy, TaskTemplate

PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
CANCELLED = "cancelled"
DEAD_LETTER = "dead_letter"
DISCARDED = "discarded"   # a dead letter an operator discarded: kept for audit until retention
RETRYING = "retrying"     # a view of pending (failures > 0), never a task's `state`

STATES = (PENDING, RUNNING, COMPLETED, CANCELLED, DEAD_LETTER, DISCARDED)
TERMINAL = (COMPLETED, CANCELLED, DEAD_LETTER, DISCARDED)
LIVE = (PENDING, RUNNING)

# Attempt outcomes
ATTEMPT_OUTCOMES = ("completed", "failed", "lease_expired", "timed_out", "cancelled",
                    "released", "rate_limited")
FIRE_OUTCOMES = ("ran", "skipped", "missed")
_NO_ATTEMPTS: tuple[Attempt, ...] = ()


class Attempt:
    """One claim of a task: who held it, with which token, and how it ended."""

    __slots__ = ("attempt", "worker_id", "fencing_token", "started_at_ms", "ended_at_ms",
                 "outcome", "error")

    def __init__(self, attempt: int, worker_id: str, fencing_token: int, started_at_ms: int,
                 ended_at_ms: int | None = None, outcome: str | None = None,
                 error: str | None = None) -> None:
        self.attempt = attempt
        self.worker_id = worker_id
        self.fencing_token = fencing_token
        self.started_at_ms = started_at_ms
        self.ended_at_ms = ended_at_ms
        self.outcome = outcome
        self.error = error

    def __repr__(self) -> str:
        return (f"Attempt({self.attempt}, {self.worker_id!r}, token={self.fencing_token}, "
                f"outcome={self.outcome!r})")


class Task:
    """A task record. `seq` is its submission order; `failures` counts failed attempts since
    submission or the last replay (the retry budget); `qver` is bookkeeping of the claim
    queue, not replicated state."""

    __slots__ = ("task_id", "tenant", "task_type", "payload_json", "priority", "run_at_ms",
                 "state", "attempt", "max_retries", "retry", "timeout_ms", "idempotency_key",
                 "schedule_id", "lease_expires_at_ms", "fencing_token", "worker_id",
                 "cancel_requested", "last_error", "result_json", "created_at_ms",
                 "started_at_ms", "completed_at_ms", "_attempts", "seq", "failures", "qver",
                 "limits", "traceparent")

    def __init__(self, task_id: str, tenant: str, task_type: str, payload_json: str,
                 priority: int, run_at_ms: int, max_retries: int, retry: RetryPolicy,
                 timeout_ms: int, idempotency_key: str | None, schedule_id: str | None,
                 created_at_ms: int, seq: int) -> None:
        self.task_id = task_id
        self.tenant = tenant
        self.task_type = task_type
        self.payload_json = payload_json
        self.priority = priority
        self.run_at_ms = run_at_ms
        self.state = PENDING
        self.attempt = 0
        self.max_retries = max_retries
        self.retry = retry
        self.timeout_ms = timeout_ms
        self.idempotency_key = idempotency_key
        self.schedule_id = schedule_id
        self.lease_expires_at_ms: int | None = None
        self.fencing_token = 0
        self.worker_id: str | None = None
        self.cancel_requested = False
        self.last_error: str | None = None
        self.result_json: str | None = None
        self.created_at_ms = created_at_ms
        self.started_at_ms: int | None = None
        self.completed_at_ms: int | None = None
        self._attempts: list[Attempt] | None = None
        self.seq = seq
        self.failures = 0
        self.qver = 0
        self.limits: tuple[str, ...] = ()   # names of keyed limits (ratelimits.py)
        # The submitter's W3C trace context (`traceparent`), handed to the worker with each
        # claim: every attempt's span is a child of the submitter's (DESIGN 12).
        self.traceparent: str | None = None

    @property
    def execution_id(self) -> str:
        """Stable per occurrence: every attempt of one task shares it."""
        return self.task_id

    @property
    def attempts(self) -> list[Attempt] | tuple[Attempt, ...]:
        return self._attempts if self._attempts is not None else _NO_ATTEMPTS

    def add_attempt(self, attempt: Attempt, kept_max: int) -> None:
        if self._attempts is None:
            self._attempts = []
        self._attempts.append(attempt)
        if len(self._attempts) > kept_max:
            del self._attempts[0]

    def current_attempt(self) -> Attempt | None:
        return self._attempts[-1] if self._attempts else None

    def __repr__(self) -> str:
        return f"Task({self.task_id!r}, {self.tenant!r}, {self.task_type!r}, {self.state})"


class FireRecord:
    __slots__ = ("fire_ms", "outcome", "task_id")

    def __init__(self, fire_ms: int, outcome: str, task_id: str | None) -> None:
        self.fire_ms = fire_ms
        self.outcome = outcome
        self.task_id = task_id

    def __repr__(self) -> str:
        return f"FireRecord({self.fire_ms}, {self.outcome!r}, {self.task_id!r})"


class Schedule:
    __slots__ = ("tenant", "schedule_id", "cron", "timezone", "template", "overlap", "misfire",
                 "catchup_window_ms", "paused", "start_at_ms", "end_at_ms", "jitter_ms",
                 "next_fire_ms", "fires", "created_at_ms", "updated_at_ms")

    def __init__(self, tenant: str, schedule_id: str, cron: str, timezone: str,
                 template: TaskTemplate, overlap: str, misfire: str, catchup_window_ms: int,
                 paused: bool, start_at_ms: int | None, end_at_ms: int | None, jitter_ms: int,
                 next_fire_ms: int | None, created_at_ms: int, updated_at_ms: int,
                 fires: list[FireRecord] | None = None) -> None:
        self.tenant = tenant
        self.schedule_id = schedule_id
        self.cron = cron
        self.timezone = timezone
        self.template = template
        self.overlap = overlap
        self.misfire = misfire
        self.catchup_window_ms = catchup_window_ms
        self.paused = paused
        self.start_at_ms = start_at_ms
        self.end_at_ms = end_at_ms
        self.jitter_ms = jitter_ms
        self.next_fire_ms = next_fire_ms
        self.fires = fires if fires is not None else []
        self.created_at_ms = created_at_ms
        self.updated_at_ms = updated_at_ms

    def __repr__(self) -> str:
        return f"Schedule({self.tenant!r}, {self.schedule_id!r}, next={self.next_fire_ms})"


class TenantView:
    """A tenant's settings and counts. `service` (claims granted) drives weighted fair
    share; `live` counts its pending + running tasks (the per-tenant limit)."""

    __slots__ = ("tenant", "max_running", "weight", "running", "pending", "service")

    def __init__(self, tenant: str, max_running: int = 0, weight: int = 1) -> None:
        self.tenant = tenant
        self.max_running = max_running
        self.weight = weight
        self.running = 0
        self.pending = 0
        self.service = 0

    @property
    def live(self) -> int:
        return self.running + self.pending

    def at_cap(self) -> bool:
        return 0 < self.max_running <= self.running

    def __repr__(self) -> str:
        return (f"TenantView({self.tenant!r}, max_running={self.max_running}, "
                f"weight={self.weight}, running={self.running}, pending={self.pending})")
