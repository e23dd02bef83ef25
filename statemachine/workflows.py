"""Workflows: submit, cancel, and the resolution of steps as their parents finish
(DESIGN.md section 5.2). Records and the graph check: graphs.py.

Resolution has one entry: the store notes every move of a task that is a step
(`Store.watched`), and the machine calls `settle` after each command's handler, in the same
apply. `settle` follows each noted task into its step, and from it to its children
(`Step.children`): completing a step costs O(children), never a scan. A child whose last
parent finished gets its task there and then, with the id its submit carried.

The rules, for a step S and a child C of it:
- S completed: C waits for one parent fewer; at none, C's task is created (pending).
- S failed (dead-lettered, cancelled; discarding a dead letter changes nothing): C with
  `on_parent_failure` "run" counts S as finished; C with "cancel" still waiting is
  cancelled (cause "parent"), which fails C's own children in turn.
- S replayed (dead letter -> pending): C counts S as unfinished again if it still waits
  (a "run" child not yet started); a "cancel" child cancelled by a failed parent resumes
  waiting once none of its parents is failed any more (and its own cancelled children
  after it), unless the workflow was cancelled. A child already running or finished is
  left as it is.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from . import audit
from . import commands as c
from . import validate as V
from .errors import (CONFLICT, INVALID_ARGUMENT, INVALID_STATE, NOT_FOUND, TENANT_LIMIT,
                     DecodeError)
from .graphs import (BY_PARENT, BY_WORKFLOW, FAILED, FINAL, ON_FAILURE_CANCEL,
                     ON_PARENT_FAILURE, WAITING, WF_CANCELLED, WF_COMPLETED, WF_FAILED,
                     STEP_STATES, WF_RUNNING, Step, Workflow, check_acyclic, check_deps,
                     workflow_record)
from .lifecycle import CANCEL, decide
from .limits import Limits
from .model import CANCELLED, COMPLETED, PENDING, RUNNING, Task
from .results import Answer
from .records import retry_from
from .tasks import add
from .tenants import check_admission, check_capacity, tenant
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine

_STEP_FIELDS = 6       # a step row of SubmitWorkflow (commands.py), then its traceparent
_STEP_RECORD_FIELDS = 16   # a step's record without its trace context (graphs.step_record)
_TEMPLATE_FIELDS = 5   # a template row of it


class Book:
    """The workflows (replicated) and their derived indexes."""

    def __init__(self) -> None:
        self.by_id: dict[str, Workflow] = {}            # in submission (seq) order
        self.seq = 0                                    # replicated: workflows submitted
        self.finish_seq = 0                             # replicated: workflows finished
        # derived
        self.step_of: dict[str, tuple[Workflow, int]] = {}   # every step's task id
        self.idem: dict[tuple[str, str], Workflow] = {}
        self.open_by_tenant: dict[str, int] = {}
        self.finished: OrderedDict[str, Workflow] = OrderedDict()   # oldest finish first
        self.steps_kept = 0

    def index(self, wf: Workflow) -> None:
        """`wf` enters (a submit, a restore)."""
        self.by_id[wf.workflow_id] = wf
        for i, step in enumerate(wf.steps):
            self.step_of[step.task_id] = (wf, i)
        if wf.idempotency_key is not None:
            self.idem[(wf.tenant, wf.idempotency_key)] = wf
        self.steps_kept += len(wf.steps)
        if wf.state == WF_RUNNING:
            self.open_by_tenant[wf.tenant] = self.open_by_tenant.get(wf.tenant, 0) + 1
        else:
            self.finished[wf.workflow_id] = wf

    def unindex(self, wf: Workflow) -> None:
        """A finished `wf` leaves (retention: the oldest finished first)."""
        del self.by_id[wf.workflow_id]
        del self.finished[wf.workflow_id]
        for step in wf.steps:
            del self.step_of[step.task_id]
        if wf.idempotency_key is not None and self.idem.get(
                (wf.tenant, wf.idempotency_key)) is wf:
            del self.idem[(wf.tenant, wf.idempotency_key)]
        self.steps_kept -= len(wf.steps)


def workflow_answer(workflow_id: str, duplicate: bool | None = None) -> Answer:
    return ("ok", "", None, "workflow", [workflow_id, duplicate])


# --- submit ---------------------------------------------------------------------------------

def submit(sm: StateMachine, cmd: c.SubmitWorkflow) -> Answer:
    """All steps in this one apply, or none: every check comes before any change. A repeated
    idempotency key answers the existing workflow (duplicate=True), as a task submit does."""
    book = sm.workflows
    _check_submit(cmd, sm.limits)
    name = sys.intern(cmd.tenant)
    if cmd.idempotency_key is not None:
        existing = book.idem.get((name, cmd.idempotency_key))
        if existing is not None:
            return workflow_answer(existing.workflow_id, True)
    steps = _steps(sm, cmd)
    _check_room(sm, cmd.workflow_id, name, steps)
    book.seq += 1
    wf = Workflow(cmd.workflow_id, name, book.seq, steps, cmd.idempotency_key, sm.now_ms)
    wf.traceparent = cmd.traceparent
    wf.link()
    book.index(wf)
    tenant(sm, name)
    for i, step in enumerate(steps):
        if not step.deps:
            _start(sm, wf, i)
    return workflow_answer(wf.workflow_id, False)


def _check_submit(cmd: V.Unchecked, lim: Limits) -> None:
    """The command's own fields, read untyped: any of them may hold anything the log can
    carry (a compiled build checks a typed read), so nothing typed is read before this."""
    V.string("workflow_id", cmd.workflow_id, lim.id_chars_max)
    V.string("tenant", cmd.tenant, lim.tenant_chars_max)
    V.string("idempotency_key", cmd.idempotency_key, lim.idempotency_key_chars_max,
             optional=True)
    V.traceparent(cmd.traceparent)


def _steps(sm: StateMachine, cmd: V.Unchecked) -> list[Step]:
    """The command's templates and step rows, checked field by field and as a graph."""
    lim, rows = sm.limits, cmd.steps
    if not isinstance(rows, (list, tuple)) or not 0 < len(rows) <= lim.workflow_steps_max:
        raise Rejected(INVALID_ARGUMENT, f"a workflow has 1..{lim.workflow_steps_max} steps",
                       field="steps", limit=lim.workflow_steps_max)
    templates = _templates(sm, cmd.templates, len(rows))
    steps = [_step(sm, row, templates) for row in rows]
    names: dict[str, int] = {}
    edges = 0
    for i, step in enumerate(steps):
        if step.name in names:
            raise Rejected(INVALID_ARGUMENT, f"step name {step.name!r} appears twice",
                           field="steps", step=step.name)
        names[step.name] = i
        check_deps(step.name, step.deps, len(steps), i)
        edges += len(step.deps)
    if edges > lim.workflow_edges_max:
        raise Rejected(INVALID_ARGUMENT, f"a workflow has at most {lim.workflow_edges_max} "
                       "deps in all", field="steps", limit=lim.workflow_edges_max)
    check_acyclic([s.name for s in steps], [s.deps for s in steps])
    return steps


def _templates(sm: StateMachine, rows: Any, steps: int) -> list[c.TaskTemplate]:
    """The shared task fields, each checked once (a payload is the step's own)."""
    if not isinstance(rows, (list, tuple)) or not 0 < len(rows) <= steps:
        raise Rejected(INVALID_ARGUMENT, "a workflow's templates are 1 to one per step",
                       field="templates")
    out = []
    for row in rows:
        if not isinstance(row, (list, tuple)) or len(row) != _TEMPLATE_FIELDS \
                or not isinstance(row[4], (list, tuple)) or len(row[4]) != 5:
            raise Rejected(INVALID_ARGUMENT, "a template is a row of task fields",
                           field="templates")
        task_type, priority, timeout_ms, retries, retry = row
        template = c.TaskTemplate(
            task_type=task_type, priority=priority, timeout_ms=timeout_ms, max_retries=retries,
            retry=c.RetryPolicy(backoff=retry[0], base_ms=retry[1], max_ms=retry[2],
                                multiplier_milli=retry[3], jitter_permille=retry[4]))
        V.task_fields(template, sm.limits)
        out.append(template)
    return out


def _step(sm: StateMachine, row: Any, templates: list[c.TaskTemplate]) -> Step:
    lim = sm.limits
    if not isinstance(row, (list, tuple)) or len(row) not in (_STEP_FIELDS, _STEP_FIELDS + 1):
        raise Rejected(INVALID_ARGUMENT, "a step is a row of its fields", field="steps")
    name, task_id, at, payload, deps, rule = row[:_STEP_FIELDS]
    traceparent = row[_STEP_FIELDS] if len(row) > _STEP_FIELDS else None
    V.string("step", name, lim.step_name_chars_max)
    V.string("task_id", task_id, lim.id_chars_max)
    try:
        V.traceparent(traceparent)
        V.integer("template", at, 0, len(templates) - 1)
        V.sized("payload", payload, lim.payload_bytes_max)
        V.choice("on_parent_failure", rule, ON_PARENT_FAILURE)
    except Rejected as r:
        raise Rejected(r.code, f"step {name!r}: {r.message}", **r.details, step=name) from None
    if not isinstance(deps, (list, tuple)) or len(deps) > lim.workflow_deps_max:
        raise Rejected(INVALID_ARGUMENT, f"step {name!r} has more than "
                       f"{lim.workflow_deps_max} deps", field="deps", step=name)
    for j in deps:   # ints before they are kept as such (their range: check_deps)
        if type(j) is not int:
            raise Rejected(INVALID_ARGUMENT, f"step {name!r} has a dep that is not a step",
                           field="deps", step=name)
    shared = templates[at]
    template = shared if payload == shared.payload_json else \
        c.TaskTemplate(task_type=shared.task_type, payload_json=payload,
                       priority=shared.priority, timeout_ms=shared.timeout_ms,
                       max_retries=shared.max_retries, retry=shared.retry)
    step = Step(sys.intern(name), task_id, template, tuple(deps), rule)
    step.traceparent = traceparent
    return step


def _check_room(sm: StateMachine, workflow_id: str, name: str, steps: list[Step]) -> None:
    """Ids unused, and room: open workflows of the tenant, steps kept, live tasks."""
    lim, book = sm.limits, sm.workflows
    if workflow_id in book.by_id:
        raise Rejected(CONFLICT, f"workflow {workflow_id} already exists",
                       workflow_id=workflow_id)
    ids: dict[str, bool] = {}
    for step in steps:
        if step.task_id in sm.tasks or step.task_id in book.step_of or step.task_id in ids:
            raise Rejected(CONFLICT, f"task {step.task_id} already exists",
                           task_id=step.task_id, step=step.name)
        ids[step.task_id] = True
    if book.open_by_tenant.get(name, 0) >= lim.workflows_open_per_tenant_max:
        raise Rejected(TENANT_LIMIT, f"tenant {name} has "
                       f"{lim.workflows_open_per_tenant_max} open workflows",
                       limit=lim.workflows_open_per_tenant_max)
    check_admission(sm, max(s.template.priority for s in steps))   # shed as its least urgent
    check_capacity(sm, name)
    view = sm.tenants.get(name)
    if view is not None and view.live + len(steps) > lim.live_tasks_per_tenant_max:
        raise Rejected(TENANT_LIMIT, f"tenant {name} has no room for {len(steps)} more "
                       "live tasks", limit=lim.live_tasks_per_tenant_max)
    _make_room(sm, len(steps))


def _make_room(sm: StateMachine, n: int) -> None:
    """Evict the oldest finished workflows until `n` more steps fit the bound (or refuse,
    before any eviction, when even evicting all of them would not make room)."""
    lim, book = sm.limits, sm.workflows
    finished_steps = sum(len(w.steps) for w in book.finished.values()) \
        if book.steps_kept + n > lim.workflow_steps_kept_max else 0
    if book.steps_kept - finished_steps + n > lim.workflow_steps_kept_max:
        raise Rejected(TENANT_LIMIT, f"at most {lim.workflow_steps_kept_max} workflow steps "
                       "kept", limit=lim.workflow_steps_kept_max)
    while book.steps_kept + n > lim.workflow_steps_kept_max:
        book.unindex(next(iter(book.finished.values())))


# --- cancel ---------------------------------------------------------------------------------

def cancel(sm: StateMachine, cmd: c.CancelWorkflow) -> Answer:
    """Waiting steps cancelled for good, pending ones cancelled, running ones asked to stop
    (as a task cancel does: the attempt's end cancels them, unless it completes)."""
    _check_cancel(cmd, sm.limits)
    wf = find(sm, cmd.workflow_id, cmd.tenant)
    if wf.state != WF_RUNNING:
        raise Rejected(INVALID_STATE, f"workflow {wf.workflow_id} is {wf.state}",
                       state=wf.state)
    wf.cancelled = True
    for i, step in enumerate(wf.steps):
        if step.state == WAITING:
            step.cause = BY_WORKFLOW
            _set(sm, wf, i, CANCELLED)
    for step in wf.steps:
        task = sm.tasks.get(step.task_id)
        if task is not None and step.state in (PENDING, RUNNING):
            row = decide(task, CANCEL)
            if row.new == RUNNING:
                task.cancel_requested = True
            else:
                sm.store.move(task, row.new, sm.now_ms)
    _audit(sm, cmd, wf)
    return workflow_answer(wf.workflow_id)


def _check_cancel(cmd: V.Unchecked, lim: Limits) -> None:
    V.string("workflow_id", cmd.workflow_id, lim.id_chars_max)
    V.scope(cmd, lim)


def _audit(sm: StateMachine, cmd: c.CancelWorkflow, wf: Workflow) -> None:
    audit.record(sm, cmd, "workflow.cancel", wf.tenant, wf.workflow_id,
                 {"before": {"state": WF_RUNNING, "cancel_requested": False},
                  "after": {"state": wf.state, "cancel_requested": True}})


def find(sm: StateMachine, workflow_id: str, scope: str | None) -> Workflow:
    wf = sm.workflows.by_id.get(workflow_id)
    if wf is None or (scope is not None and wf.tenant != scope):
        raise Rejected(NOT_FOUND, f"workflow {workflow_id} not found", workflow_id=workflow_id)
    return wf


# --- a step's result: its children read it --------------------------------------------------

def check_result(sm: StateMachine, task: Task, result_json: str) -> None:
    """A step's result is bounded tighter than a task's (its children load all of their
    parents' results): over the bound the completion is refused `too_large`, never cut."""
    if task.task_id not in sm.workflows.step_of:
        return
    try:
        V.sized("result", result_json, sm.limits.step_result_bytes_max)   # UTF-8 bytes
    except Rejected as r:
        raise Rejected(r.code, f"a workflow step's {r.message}", **r.details) from None


# --- resolution -------------------------------------------------------------------------------

def settle(sm: StateMachine) -> None:
    """Follow every step task the store saw move (in order) into its workflow."""
    moved = sm.store.moved
    book = sm.workflows
    while moved:
        task = moved.popleft()
        found = book.step_of.get(task.task_id)
        if found is None:
            continue
        wf, i = found
        step = wf.steps[i]
        if step.state == task.state:
            continue
        before = step.state
        if task.state == COMPLETED:
            step.result_json = task.result_json
        elif task.state in FAILED:
            step.error = task.last_error
        _set(sm, wf, i, task.state)
        _follow(sm, wf, i, before)


def _follow(sm: StateMachine, wf: Workflow, i: int, before: str) -> None:
    """What step i's change from `before` means for its children."""
    now = wf.steps[i].state
    if now == COMPLETED:
        for k in wf.steps[i].children:
            _parent_done(sm, wf, k)
    elif now in FAILED and before not in FAILED:
        _failed(sm, wf, i)
    elif before in FAILED and now not in FAILED:
        _revived(sm, wf, i)


def _parent_done(sm: StateMachine, wf: Workflow, k: int) -> None:
    child = wf.steps[k]
    if child.state == WAITING:
        child.unfinished -= 1
        if child.unfinished == 0:
            _start(sm, wf, k)


def _failed(sm: StateMachine, wf: Workflow, i: int) -> None:
    """Step i failed: its children learn it; "cancel" ones still waiting are cancelled, and
    so on down (a stack, not recursion: a chain may be 10,000 steps long)."""
    stack = [i]
    while stack:
        j = stack.pop()
        for k in wf.steps[j].children:
            child = wf.steps[k]
            child.failed += 1
            if child.state != WAITING:
                continue
            if child.on_parent_failure == ON_FAILURE_CANCEL:
                child.cause = BY_PARENT
                _set(sm, wf, k, CANCELLED)
                stack.append(k)
            else:
                _parent_done(sm, wf, k)


def _revived(sm: StateMachine, wf: Workflow, i: int) -> None:
    """Step i left a failed state (a replay): its children count it unfinished again, and
    the ones its failure cancelled resume waiting when no parent of theirs failed."""
    stack = [i]
    while stack:
        j = stack.pop()
        for k in wf.steps[j].children:
            child = wf.steps[k]
            child.failed -= 1
            if child.state == WAITING:
                child.unfinished += 1
            elif child.state == CANCELLED and child.cause == BY_PARENT \
                    and child.failed == 0 and not wf.cancelled:
                child.cause = None
                child.unfinished = sum(1 for d in child.deps
                                       if wf.steps[d].state != COMPLETED)
                _set(sm, wf, k, WAITING)
                stack.append(k)


def _start(sm: StateMachine, wf: Workflow, i: int) -> None:
    """Step i's parents are done: its task enters, pending, due now."""
    step, t = wf.steps[i], wf.steps[i].template
    sm.task_seq += 1
    task = Task(step.task_id, wf.tenant, sys.intern(t.task_type), t.payload_json, t.priority,
                sm.now_ms, t.max_retries, t.retry, t.timeout_ms, None, None, sm.now_ms,
                sm.task_seq)
    task.traceparent = step.traceparent or wf.traceparent
    add(sm, task)
    _set(sm, wf, i, PENDING)


def _set(sm: StateMachine, wf: Workflow, i: int, state: str) -> None:
    """Step i's state, the workflow's counts, and the workflow's own state with them."""
    step = wf.steps[i]
    wf.counts[step.state] -= 1
    step.state = state
    wf.counts[state] += 1
    if state in FINAL and wf.state == WF_RUNNING and wf.open_steps == 0:
        _finish(sm, wf)
    elif state not in FINAL and wf.state != WF_RUNNING:
        _reopen(sm, wf)


def _finish(sm: StateMachine, wf: Workflow) -> None:
    book = sm.workflows
    wf.state = WF_CANCELLED if wf.cancelled else (
        WF_COMPLETED if wf.counts[COMPLETED] == len(wf.steps) else WF_FAILED)
    wf.finished_at_ms = sm.now_ms
    book.finish_seq += 1
    wf.finish_seq = book.finish_seq
    book.open_by_tenant[wf.tenant] -= 1
    if not book.open_by_tenant[wf.tenant]:
        del book.open_by_tenant[wf.tenant]
    book.finished[wf.workflow_id] = wf


def _reopen(sm: StateMachine, wf: Workflow) -> None:
    """A replayed step of a finished workflow: running again (it may then exceed the
    tenant's bound of open workflows: the bound governs submits, never a replay)."""
    book = sm.workflows
    wf.state = WF_RUNNING
    wf.finished_at_ms = None
    wf.finish_seq = 0
    del book.finished[wf.workflow_id]
    book.open_by_tenant[wf.tenant] = book.open_by_tenant.get(wf.tenant, 0) + 1


# --- snapshots: the records, and the indexes rebuilt from them -------------------------------

def head_fields(sm: StateMachine) -> dict:
    """What a snapshot's head holds of the workflows; nothing for a state that never had
    one, so that such a snapshot stays format 6 (snapshot.py)."""
    book = sm.workflows
    if not book.by_id and not book.seq:
        return {}
    return {"wf_seq": book.seq, "wf_finish_seq": book.finish_seq,
            "workflows": [workflow_record(w) for w in book.by_id.values()]}


def restore(sm: StateMachine, head: dict) -> None:
    """The workflows of a snapshot's head (format 7), in submission order."""
    book = sm.workflows
    records = head.get("workflows", ())
    try:
        book.seq, book.finish_seq = int(head.get("wf_seq", 0)), int(head.get("wf_finish_seq", 0))
        wfs = [workflow_from(r) for r in records]
    except (TypeError, ValueError, KeyError, IndexError, Rejected) as exc:
        raise DecodeError(f"snapshot workflows: {exc.__class__.__name__}") from None
    for wf in wfs:
        book.index(wf)
    if len(book.by_id) != len(wfs):
        raise DecodeError("snapshot: a workflow id appears twice")
    # retention evicts the one that finished first: the finished in that order
    finished = sorted(book.finished.values(), key=lambda w: w.finish_seq)
    book.finished = OrderedDict((w.workflow_id, w) for w in finished)


_WORKFLOW_FIELDS = 10   # of a record without the optional trace context (graphs.py)


def workflow_from(r: Any) -> Workflow:
    traceparent = r[_WORKFLOW_FIELDS] if len(r) > _WORKFLOW_FIELDS else None
    V.traceparent(traceparent)
    (workflow_id, tenant_name, seq, state, cancelled, idem, created_at_ms, finished_at_ms,
     finish_seq, steps) = r[:_WORKFLOW_FIELDS]
    wf = Workflow(workflow_id, sys.intern(tenant_name), seq, [_step_from(s) for s in steps],
                  idem, created_at_ms)
    wf.state, wf.cancelled = state, cancelled
    wf.finished_at_ms, wf.finish_seq = finished_at_ms, finish_seq
    wf.traceparent = traceparent
    wf.link()
    return wf


def _step_from(r: Any) -> Step:
    traceparent = r[_STEP_RECORD_FIELDS] if len(r) > _STEP_RECORD_FIELDS else None
    V.traceparent(traceparent)
    (name, task_id, task_type, payload, priority, timeout_ms, retries, retry, deps, rule,
     state, unfinished, failed, cause, result_json, error) = r[:_STEP_RECORD_FIELDS]
    template = c.TaskTemplate(task_type=task_type, payload_json=payload, priority=priority,
                              timeout_ms=timeout_ms, max_retries=retries,
                              retry=retry_from(retry, {}))
    step = Step(sys.intern(name), task_id, template, tuple(deps), rule)
    if state not in STEP_STATES:
        raise ValueError(state)
    step.state, step.unfinished, step.failed, step.cause = state, unfinished, failed, cause
    step.result_json, step.error = result_json, error
    step.traceparent = traceparent
    return step


# --- reads (callers hold the replica lock) ------------------------------------------------------

def get(sm: StateMachine, workflow_id: str, scope: str | None = None) -> Workflow | None:
    wf = sm.workflows.by_id.get(workflow_id)
    return None if wf is None or (scope is not None and wf.tenant != scope) else wf


def listing(sm: StateMachine, tenant: str | None, state: str | None, cursor: object,
            limit: int) -> tuple[list[Workflow], str | None]:
    """Newest first, by tenant and state; the cursor is the last seq shown. A scan of the
    kept workflows (bounded by `workflow_steps_kept_max`, one step at least each)."""
    before = _cursor(cursor)
    out: list[Workflow] = []
    for wf in reversed(sm.workflows.by_id.values()):
        if before is not None and wf.seq >= before:
            continue
        if (tenant is None or wf.tenant == tenant) and (state is None or wf.state == state):
            out.append(wf)
            if len(out) > limit:
                out.pop()
                return out, str(out[-1].seq)
    return out, None


def _cursor(cursor: object) -> int | None:
    if cursor is None:
        return None
    if type(cursor) is not str or not cursor.isdigit() or len(cursor) > 19:
        raise ValueError("not a workflow cursor")
    return int(cursor)


def step_of(sm: StateMachine, task_id: str) -> tuple[Workflow, int] | None:
    """The workflow and step index of a step's task (a worker's `ctx.parents`)."""
    return sm.workflows.step_of.get(task_id)
