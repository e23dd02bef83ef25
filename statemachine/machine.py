"""StateMachine: applies commands to the replicated task state (DESIGN section 5).

Where things are (each module readable on its own):

- machine.py (here): `apply` checks a command's envelope (request_id, now_ms), advances the
  clock, answers a repeated request_id from the request table, checks a new one against
  the table's window (request_table.py), and otherwise runs the command's handler; the
  public API of docs/internals.md.
- handlers, by what they act on: tasks.py (submit, cancel, replay, discard, retention),
  leases.py (claim, heartbeat, complete, fail, release, lease expiry), schedules.py,
  tenants.py. A handler validates first (validate.py) and raises `Rejected` before it
  changes anything; it returns a typed answer (results.py), which the request table keeps
  and `results.render` turns into a `Result`, so a first answer and a repeated one come
  from the same code.
- lifecycle.py: the table every change of a task's state goes through.
- store.py: every derived index (claim queue, heaps, listings, counters).
- reads.py and snapshot.py: reads, and snapshot/restore.
- digest.py: the rolling digest and the state digest; codec.py: bytes in and out.

Replicated state: tasks, tenants, schedules, worker sessions (sessions.py), the request
table (with the times its entries were recorded), the audit trail (audit.py), paused queues
(pauses.py, kept by the store) and four counters (seq,
now_ms, cluster_token, task_seq), and the digest's `roll` (a hash of every batch applied and
its result codes, digest.py). Everything else is derived (the store) and rebuilt by
`restore`.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from . import codec
from . import commands as c
from . import (audit, heads, leases, limit_commands, pause_commands, reads, request_table,
               schedules, sessions, snapshot, tasks, tenants, workflows)
from . import validate as V
from . import digest as D
from .errors import INVALID_ARGUMENT, OK, OVERLOADED, REQUEST_EXPIRED, TENANT_LIMIT, Result
from .limits import Limits
from .graphs import Workflow
from .model import Schedule, Task, TenantView
from .results import DONE, Answer, refused, render
from .store import Store
from .validate import Rejected

# A handler takes the machine and its command (any field of which may hold anything the log
# can carry until the handler's validation has checked it) and returns the answer's row.
Handler = Callable[["StateMachine", Any], Answer]
HANDLERS: dict[type[c.Command], Handler] = {
    c.SubmitTask: tasks.submit, c.Cancel: tasks.cancel, c.Replay: tasks.replay,
    c.Discard: tasks.discard,
    c.Claim: leases.claim, c.Heartbeat: leases.heartbeat, c.Complete: leases.complete,
    c.Fail: leases.fail, c.Release: leases.release, c.Tick: leases.tick,
    c.SetTenant: tenants.set_tenant,
    c.PutSchedule: schedules.put_schedule, c.DeleteSchedule: schedules.delete_schedule,
    c.PauseSchedule: schedules.pause_schedule, c.ResumeSchedule: schedules.resume_schedule,
    c.Fire: schedules.fire,
    c.Barrier: lambda sm, cmd: DONE,
    c.AuditNote: audit.note,
    c.PutLimit: limit_commands.put_limit, c.DeleteLimit: limit_commands.delete_limit,
    c.PauseLimit: limit_commands.pause_limit,
    c.SubmitWorkflow: workflows.submit, c.CancelWorkflow: workflows.cancel,
    c.PauseQueue: pause_commands.pause_queue, c.ResumeQueue: pause_commands.resume_queue,
    c.OpenSession: sessions.open_session, c.EndSession: sessions.end_session,
}
# Commands that take an `actor` (DESIGN 14.6): their handlers record an audit entry.
AUDITED = (c.Cancel, c.Replay, c.Discard, c.SetTenant, c.PutSchedule, c.DeleteSchedule,
           c.PauseSchedule, c.ResumeSchedule, c.Fire, c.PutLimit, c.DeleteLimit,
           c.CancelWorkflow, c.PauseQueue, c.ResumeQueue)
UNRECORDED = (c.Tick, c.Barrier)   # repeating them is harmless: not in the request table
# A successful Complete is not recorded either: its task is then completed for good with
# that token (no row leaves `completed` but eviction), so a repeat takes the lifecycle's
# repeat row and gets the same answer as the recorded one would give (not_found once the
# task is evicted, as a recorded answer naming a gone task does). A refused one is recorded
# (its answer could change: a token issued later). Saves a request-table entry, and an
# eviction, per lifecycle.
RECORDED_WHEN_REFUSED = (c.Complete,)
# A refusal for capacity (`overloaded`, `tenant_limit`) is never recorded: it changed
# nothing and it means "try again later", so a retry under the same request id is decided
# afresh rather than refused again from the table; and under overload a flood of them
# would push the records of applied commands out of the FIFO table (and fill memory with
# answers nobody will ask for again), weakening exactly-once for the writes that went in.
# A request id older than its window (`request_expired`, request_table.py) is not recorded
# either: it changed nothing, and every repeat of it is refused alike (the clock only
# advances), so recording it would only fill the table. (One too far ahead is an
# `invalid_argument`, recorded as any.)
UNRECORDED_REFUSALS = (OVERLOADED, TENANT_LIMIT, REQUEST_EXPIRED)


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
        self.request_times = request_table.RequestTimes()   # when each was recorded
        self.roll = D.ROLL_START          # digest.py: every batch and its result codes
        self.audit = audit.Trail()        # audit.py: operator actions (its `evicted`: not)
        self.workflows = workflows.Book()  # workflows.py: graphs of steps (and their indexes)
        self.sessions: dict[str, sessions.Session] = {}   # sessions.py: by worker id
        # derived
        self.store = Store(self.limits, self.tasks, self.tenants, self.schedules)
        self.store.watched = self.workflows.step_of   # moves of steps' tasks are noted
        self._queue = self.store.queue    # read by the node's metrics

    # --- applying commands ----------------------------------------------------------------
    def apply_batch(self, cmds: Sequence[c.Command]) -> list[Result]:
        """`cmds` as `codec.decode_batch` returns them (a `Batch` that keeps its bytes for
        the roll), or any list of commands (encoded here for the roll)."""
        apply = self._apply_untidy
        results = [apply(cmd) for cmd in cmds] if isinstance(cmds, (list, tuple)) else []
        self.store.limiter.settle(self.now_ms)
        # Handlers check the liveness of every heap entry they use, so only readers need
        # live tops: tidying once per batch does the same pops for less.
        self.store.tidy()
        self.seq += 1
        raw = getattr(cmds, "raw", None)
        self.roll = D.roll_step(self.roll, _bytes_of(cmds) if raw is None else raw,
                                [r.code for r in results])
        return results

    def apply(self, cmd: V.Unchecked) -> Result:
        """One command, without advancing seq (tests)."""
        result = self._apply_untidy(cmd)
        self.store.limiter.settle(self.now_ms)
        self.store.tidy()
        return result

    def _apply_untidy(self, cmd: V.Unchecked) -> Result:
        handler = HANDLERS.get(type(cmd))
        if handler is None:
            return Result(INVALID_ARGUMENT, "not a command", None, {})
        try:
            V.envelope(cmd, self.limits)
        except Rejected as r:
            return Result(r.code, r.message, None, r.details)
        self.now_ms = max(self.now_ms, cmd.now_ms)
        recorded = type(cmd) not in UNRECORDED
        try:
            if recorded:
                row = self.requests.get(cmd.request_id)
                if row is not None:
                    return render(self, row)
                request_table.admit(self, cmd.request_id)   # its window, the table's room
            if type(cmd) in AUDITED:
                audit.check_actor(cmd, self.limits)
            row = handler(self, cmd)
            if self.store.moved:   # a step's task moved: its workflow follows, in this apply
                workflows.settle(self)
        except Rejected as r:
            row = refused(r.code, r.message, r.details)
        code = row[0]
        if recorded and code not in UNRECORDED_REFUSALS and (
                code != OK or type(cmd) not in RECORDED_WHEN_REFUSED):
            request_table.remember(self, cmd.request_id, row)
        if self.audit.evicted:
            return self._with_evicted(render(self, row))
        return render(self, row)

    def _with_evicted(self, result: Result) -> Result:
        """The audit entries this command evicted ride on its fresh result, for the node's
        archive (DESIGN 14.6); a repeat answered from the table carries none."""
        evicted, self.audit.evicted = self.audit.evicted, []
        return result._replace(details={**result.details, "audit_evicted": evicted})

    # --- reads (reads.py; callers hold the replica lock) ----------------------------------
    def get_task(self, task_id: str, tenant: str | None = None) -> Task | None:
        return reads.get_task(self, task_id, tenant)

    def list_tasks(self, state: str | None = None, tenant: str | None = None,
                   task_type: str | None = None, schedule_id: str | None = None,
                   cursor: object = None, limit: int = 100, *,
                   created_after_ms: int | None = None, created_before_ms: int | None = None,
                   finished_after_ms: int | None = None,
                   scan_max: int | None = None) -> tuple[list[Task], str | None]:
        """Tasks newest first, examining at most `scan_max` (reads.list_tasks)."""
        where = reads.TaskFilter(state, tenant, task_type, schedule_id, created_after_ms,
                                 created_before_ms, finished_after_ms)
        return reads.list_tasks(self, where, cursor, limit, scan_max)

    def get_schedule(self, tenant: str, schedule_id: str) -> Schedule | None:
        return self.schedules.get((tenant, schedule_id))

    def list_schedules(self, tenant: str | None = None, cursor: object = None,
                       limit: int = 100) -> tuple[list[Schedule], str | None]:
        return reads.list_schedules(self, tenant, cursor, limit)

    def get_workflow(self, workflow_id: str, tenant: str | None = None) -> Workflow | None:
        return workflows.get(self, workflow_id, tenant)

    def list_workflows(self, tenant: str | None = None, state: str | None = None,
                       cursor: object = None, limit: int = 100
                       ) -> tuple[list[Workflow], str | None]:
        return workflows.listing(self, tenant, state, cursor, limit)

    def step_of(self, task_id: str) -> tuple[Workflow, int] | None:
        return workflows.step_of(self, task_id)

    def get_tenant(self, tenant: str) -> TenantView | None:
        return self.tenants.get(tenant)

    def list_tenants(self) -> list[TenantView]:
        return reads.list_tenants(self)

    def audit_page(self, **query: Any) -> tuple[list, int | None]:
        """Audit entries, newest first (audit.page)."""
        return audit.page(self, **query)

    def knows_request(self, request_id: str) -> bool:
        """A command with this request id was applied (and its result is still recorded)."""
        return request_id in self.requests

    def has_claimable(self, task_types: Sequence[str], tenant: str | None, prefetch_ms: int,
                      now_ms: int,
                      priorities: tuple[int, int] = (0, 10),
                      tier_weights: tuple[tuple[int, int, int], ...] = ()) -> bool:
        """A claim of this kind would find work; with `tier_weights`, in any named tier."""
        queue, now = self.store.queue, max(now_ms, self.now_ms)
        if tier_weights:
            return any(queue.has_claimable(task_types, tenant, self.tenants, now, prefetch_ms,
                                           (w[0], w[1])) for w in tier_weights)
        return queue.has_claimable(task_types, tenant, self.tenants, now, prefetch_ms,
                                   priorities)

    def claim_head(self, task_types: Sequence[str], tenant: str | None, prefetch_ms: int,
                   now_ms: int,
                   priorities: tuple[int, int] = (0, 10)) -> int | None:
        """The effective priority of the most urgent task such a claim would take (heads.py)."""
        return heads.claim_head(self.store.queue, task_types, tenant, self.tenants,
                                max(now_ms, self.now_ms), prefetch_ms, priorities)

    def next_due_ms(self, task_types: Sequence[str], tenant: str | None = None) -> int | None:
        """Earliest run_at of a pending task of those types; a due one reads as now_ms."""
        return self.store.queue.next_due_ms(task_types, tenant, self.now_ms)

    def next_timer_ms(self) -> int | None:
        return reads.next_timer_ms(self)

    def due_fires(self, now_ms: int) -> list[tuple[str, str, int]]:
        return reads.due_fires(self, now_ms)

    def next_fire_ms(self) -> int | None:
        fires = self.store.fires
        return fires[0][0] if fires else None

    def stats(self) -> dict:
        return reads.stats(self)

    def ready_by_type(self, now_ms: int) -> dict[str, int]:
        """Pending tasks per task type that a claim could take now: due by `now_ms` (to
        the second, readiness.py) and not held by a keyed limit. Types with none are
        absent. A read that moves the derived due counts forward (callers hold the
        replica lock, as for every read)."""
        return reads.ready_by_type(self, now_ms)

    # --- snapshots (snapshot.py) and the digest (digest.py) -------------------------------
    def snapshot(self) -> bytes:
        return snapshot.snapshot(self)

    @classmethod
    def restore(cls, blob: bytes, limits: Limits | None = None) -> "StateMachine":
        return snapshot.restore(cls(limits), blob)

    def _head(self) -> dict:
        return snapshot.head(self)

    def digest(self) -> str:
        """The rolling digest, O(1): what replicas compare (digest.py)."""
        return D.hexdigest(self)

    def state_digest(self) -> str:
        """The state digest, a hash over every record: O(state) (digest.py)."""
        return D.full_hexdigest(self)


def _bytes_of(cmds: Sequence[c.Command]) -> bytes:
    """The bytes of a batch given as commands (tests, tools): as a log would hold them, or,
    for what no log can hold (junk a fuzz test applies directly), their repr."""
    try:
        return codec.encode_batch(list(cmds))
    except (TypeError, ValueError, OverflowError):
        return repr(cmds).encode()
